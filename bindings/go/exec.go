// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"iter"
	"runtime/cgo"
	"runtime/debug"
	"syscall"
)

// Callbacks run in a coroutine, for runtime.Goexit.
//
// A Go callback is called by the C library, inside eventq_loop_run. A
// runtime.Goexit in it (t.FailNow, t.SkipNow, ...) runs the goroutine's
// deferred calls and then, as cgo does for a panic that crosses C, pops
// the C frames without running them (runtime.unwindm, go1.26): the loop's
// Rust frames would be abandoned with the loop marked running, a callback
// taken out of its source, and their cleanup never done. So the callbacks
// of a run do not run on the goroutine that is inside C but in a coroutine
// of it (iter.Pull): same OS thread, a direct switch without the scheduler
// (about 200 ns more a callback, BenchmarkLoop). If a callback calls
// Goexit, the coroutine's outermost deferred call sees it (no normal
// return, nothing to recover) and, in the middle of that Goexit, yields
// back: the C callback returns an error (the source is disabled with
// ErrGoexit), the loop is stopped and unwinds normally, and only then does
// the run end the coroutine, from a C shim at the same callback depth
// (coroutine switches require the same OS-thread lock state as at
// creation): the Goexit completes and iter.Pull passes it on to the
// goroutine that called Run or RunOnce, which then exits like any goroutine
// that calls Goexit, its deferred calls run. The loop is idle and usable by
// then.

// jobKind says which callback a job runs.
type jobKind uint8

const (
	jobFd jobKind = iota
	jobTimer
	jobChan
	jobMemcg
	jobPost
)

// cbJob is one callback to run: the trampoline fills it in, the coroutine
// runs it. A value in the executor, not a closure, so a callback costs no
// allocation.
type cbJob struct {
	kind    jobKind
	s       *Source
	src     *C.eventq_source
	fd      int
	revents Events
	n       uint64
	msg     []byte
	eof     bool
	memcg   *MemcgEvent
	post    *post
	rc      C.int // the code for the C library
}

// run runs the job on the current goroutine and returns its code.
func (j *cbJob) run() C.int {
	s := j.s
	switch j.kind {
	case jobFd:
		return s.call(j.src, func() error { return s.fdFn(s, j.fd, j.revents) })
	case jobTimer:
		return s.call(j.src, func() error { return s.timerFn(s, j.n) })
	case jobChan:
		return s.call(j.src, func() error { return s.chanFn(s, j.msg, j.eof) })
	case jobMemcg:
		return s.call(j.src, func() error { return s.memcgFn(s, j.memcg) })
	case jobPost:
		j.post.run()
	}
	return 0
}

// run runs a post's fn, recovering a panic as a callback's.
func (p *post) run() {
	defer func() {
		if r := recover(); r != nil {
			p.loop.recordPanic(&PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	p.fn()
}

// executor is the coroutine of one Run or RunOnce call. It is used by the
// goroutine running the loop only (and its coroutine, which iter.Pull
// orders with it).
type executor struct {
	next   func() (struct{}, bool)
	stop   func()
	job    cbJob
	goexit bool // a callback called runtime.Goexit; the coroutine is in it
}

// dispatch runs c.exec.job, filled in by a trampoline, and returns its
// code.
func (c *loopCore) dispatch() C.int {
	e := &c.exec
	if e.goexit {
		// Not reached: the loop was stopped after the Goexit, so no
		// callback comes; run it here rather than lose a message.
		rc := e.job.run()
		e.job = cbJob{}
		return rc
	}
	if e.next == nil {
		e.next, e.stop = iter.Pull(e.serve)
	}
	e.next()
	rc := e.job.rc
	e.job = cbJob{} // keep no message or source alive
	if e.goexit {
		// No further callback of this run: it unwinds normally, then
		// finish passes the Goexit on.
		C.eventq_loop_stop(c.ptr)
	}
	return rc
}

// serve is the coroutine's body: one job per next().
func (e *executor) serve(yield func(struct{}) bool) {
	for {
		e.runJob(yield)
		if !yield(struct{}{}) {
			return
		}
	}
}

func (e *executor) runJob(yield func(struct{}) bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			// Callbacks recover their own panics; this is a guard.
			e.job.rc = -C.int(syscall.ENOTRECOVERABLE)
			return
		}
		// runtime.Goexit. Hand control back to the C callback as if the
		// job had returned; this goroutine stays suspended in its Goexit
		// until finish ends the coroutine.
		e.goexit = true
		e.job.rc = callbackCode(ErrGoexit)
		if s := e.job.s; s != nil {
			s.setErr(ErrGoexit)
		}
		yield(struct{}{})
	}()
	e.job.rc = e.job.run()
	returned = true
}

// endCoroutine runs in eqGoFinish, at the callback depth the coroutine was
// made at. The stop of iter.Pull resumes the coroutine: after a Goexit it
// completes it and calls runtime.Goexit on this goroutine.
func (c *loopCore) endCoroutine() {
	stop := c.exec.stop
	c.exec = executor{}
	stop()
}

// coreOf is the loopCore behind the handle eqGoFinish gets.
func coreOf(h C.uintptr_t) *loopCore { return cgo.Handle(h).Value().(*loopCore) }
