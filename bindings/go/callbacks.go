// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// The //export trampolines the C shims of loop.go (and memcg.go) call. A
// file with //export may only declare in its preamble, so the shims live
// in loop.go. Each trampoline gets the source's link back from the
// cgo.Handle that travelled through the C userdata as a uintptr_t and
// only collects the report into the loop's sink, in Go memory; the user's
// callbacks run once the library's call has returned (exec.go). No user
// code runs here, so nothing can panic or Goexit through C.

// #include <stdint.h>
// #include <eventq.h>
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

func linkOf(h C.uintptr_t) *srcLink { return cgo.Handle(h).Value().(*srcLink) }

//export eqGoFd
func eqGoFd(src *C.eventq_source, fd C.int, revents C.uint32_t, h C.uintptr_t) C.int {
	l := linkOf(h)
	l.sink.evs = append(l.sink.evs, event{kind: evFd, id: l.id, src: src, fd: int32(fd), revents: Events(revents)})
	return 0
}

//export eqGoTimer
func eqGoTimer(src *C.eventq_source, expirations C.uint64_t, h C.uintptr_t) C.int {
	l := linkOf(h)
	l.sink.evs = append(l.sink.evs, event{kind: evTimer, id: l.id, src: src, n: uint64(expirations)})
	return 0
}

// eqGoChanBatch collects a batch of a channel source: the messages, valid
// during this call only, are copied into one Go buffer. With other channel
// sources in the loop it ends the library's iteration here (see exec.go).
//
//export eqGoChanBatch
func eqGoChanBatch(src *C.eventq_source, data unsafe.Pointer, lens *C.size_t, count C.size_t, h C.uintptr_t) C.int {
	l := linkOf(h)
	if data == nil {
		l.sink.evs = append(l.sink.evs, event{kind: evEOF, id: l.id, src: src})
		return 0
	}
	n := int(count)
	ls := make([]int, n)
	total := 0
	for i, v := range unsafe.Slice((*C.size_t)(lens), n) {
		ls[i] = int(v)
		total += int(v)
	}
	buf := make([]byte, total)
	copy(buf, unsafe.Slice((*byte)(data), total))
	l.sink.evs = append(l.sink.evs, event{kind: evBatch, id: l.id, src: src, data: buf, lens: ls})
	if l.sink.chans.Load() > 1 {
		C.eventq_loop_stop(l.sink.ptr)
	}
	return 0
}

// eqGoDestroy is the destroy hook of every source: the library runs it
// exactly once, when the source goes away (or its add call failed), so this
// is the one place a source's handle is deleted.
//
//export eqGoDestroy
func eqGoDestroy(h C.uintptr_t) {
	l := linkOf(h)
	deleteHandle(cgo.Handle(h))
	if l.onDestroy != nil {
		l.onDestroy()
	}
}

// eqGoMemcg is the callback of every memory source (memcg.go): the event
// is copied into Go memory, for the source's MemcgFunc.
//
//export eqGoMemcg
func eqGoMemcg(src *C.eventq_source, ev *C.eventq_memcg_event, h C.uintptr_t) C.int {
	l := linkOf(h)
	l.sink.evs = append(l.sink.evs, event{kind: evMemcg, id: l.id, src: src, memcg: memcgEventOf(ev)})
	return 0
}

func newHandle(v any) cgo.Handle {
	liveHandles.Add(1)
	return cgo.NewHandle(v)
}

func deleteHandle(h cgo.Handle) {
	h.Delete()
	liveHandles.Add(-1)
}
