// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// The //export trampolines the C shims of loop.go call. A file with
// //export may only declare in its preamble, so the shims live in loop.go.
// Each trampoline gets its Go state back from the cgo.Handle that travelled
// through the C userdata as a uintptr_t, fills in the loop's job and runs
// it in the run's coroutine (exec.go), so that neither a panic (recovered
// by Source.call and post.run) nor a runtime.Goexit unwinds into C.

// #include <stdint.h>
// #include <eventq.h>
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

//export eqGoFd
func eqGoFd(src *C.eventq_source, fd C.int, revents C.uint32_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	c := s.loop
	c.exec.job = cbJob{kind: jobFd, s: s, src: src, fd: int(fd), revents: Events(revents)}
	return c.dispatch()
}

//export eqGoTimer
func eqGoTimer(src *C.eventq_source, expirations C.uint64_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	c := s.loop
	c.exec.job = cbJob{kind: jobTimer, s: s, src: src, n: uint64(expirations)}
	return c.dispatch()
}

//export eqGoChan
func eqGoChan(src *C.eventq_source, data unsafe.Pointer, n C.size_t, h C.uintptr_t) C.int {
	s := cgo.Handle(h).Value().(*Source)
	c := s.loop
	if data == nil {
		c.exec.job = cbJob{kind: jobChan, s: s, src: src, eof: true}
		return c.dispatch()
	}
	// data is valid during this call only: copy it into Go memory.
	msg := make([]byte, int(n))
	copy(msg, unsafe.Slice((*byte)(data), int(n)))
	c.exec.job = cbJob{kind: jobChan, s: s, src: src, msg: msg}
	return c.dispatch()
}

//export eqGoPost
func eqGoPost(h C.uintptr_t) {
	p := cgo.Handle(h).Value().(*post)
	c := p.loop
	c.forgetPost(cgo.Handle(h))
	c.exec.job = cbJob{kind: jobPost, post: p}
	c.dispatch()
}

// eqGoFinish ends a run's coroutine (loopCore.finish, through eq_finish).
//
//export eqGoFinish
func eqGoFinish(h C.uintptr_t) {
	coreOf(h).endCoroutine()
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
	c := s.loop
	c.exec.job = cbJob{kind: jobMemcg, s: s, src: src, memcg: memcgEventOf(ev)}
	return c.dispatch()
}
