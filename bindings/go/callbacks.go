package eventq

// The //export trampolines the C shims of loop.go call. A file with
// //export may only declare in its preamble, so the shims live in loop.go.
// Each trampoline gets its Go state back from the cgo.Handle that travelled
// through the C userdata as a uintptr_t, and never lets a panic unwind into
// C (Source.call and eqGoPost recover it).

// #include <stdint.h>
// #include <eventq.h>
import "C"

import (
	"runtime/cgo"
	"runtime/debug"
	"unsafe"
)

//export eqGoFd
func eqGoFd(src *C.eventq_source, fd C.int, revents C.uint32_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	return s.call(src, func() error { return s.fdFn(s, int(fd), Events(revents)) })
}

//export eqGoTimer
func eqGoTimer(src *C.eventq_source, expirations C.uint64_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	return s.call(src, func() error { return s.timerFn(s, uint64(expirations)) })
}

//export eqGoChan
func eqGoChan(src *C.eventq_source, data unsafe.Pointer, n C.size_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	if data == nil {
		return s.call(src, func() error { return s.chanFn(s, nil, true) })
	}
	// data is valid during this call only: copy it into Go memory.
	msg := make([]byte, int(n))
	copy(msg, unsafe.Slice((*byte)(data), int(n)))
	return s.call(src, func() error { return s.chanFn(s, msg, false) })
}

//export eqGoPost
func eqGoPost(h C.uintptr_t) {
	p := cgo.Handle(h).Value().(*post)
	p.loop.forgetPost(cgo.Handle(h))
	defer func() {
		if r := recover(); r != nil {
			p.loop.recordPanic(&PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	p.fn()
}

// eqGoDestroy is the destroy hook of every source: the library runs it
// exactly once, when the source goes away (or its add call failed), so this
// is the one place a source's handle is deleted.
//
//export eqGoDestroy
func eqGoDestroy(h C.uintptr_t) {
	s := cgo.Handle(h).Value().(*Source)
	deleteHandle(cgo.Handle(h))
	if s.onDestroy != nil {
		s.onDestroy()
	}
}

// eqGoMemcg is the callback of every memory source (memcg.go): the event
// is copied into Go memory, then the source's MemcgFunc runs.
//
//export eqGoMemcg
func eqGoMemcg(src *C.eventq_source, ev *C.eventq_memcg_event, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	e := memcgEventOf(ev)
	return s.call(src, func() error { return s.memcgFn(s, e) })
}
