// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Callbacks run in plain Go, after the library's call returned.
//
// An iteration calls eventq_loop_run_once once. The library calls the
// trampolines of callbacks.go for what is ready, and they only collect it
// into the loop's sink, in Go memory: an fd's flags, a timer's count, a
// memory event, and a channel's messages a batch per call
// (eventq_loop_add_chan_batch, one cgo crossing a batch). Once the call
// returned, the iteration runs the user's callbacks over what was
// collected, then the posts, which are queued in Go.
//
// So no user callback runs inside a C call. A panic is recovered by the
// binding like any Go panic; a runtime.Goexit unwinds Go frames only, and
// Run's deferred calls leave the loop idle and consistent: what was
// collected and not run stays queued, its position recorded before each
// callback. Nothing needs a coroutine (the previous design ran each
// callback in an iter.Pull coroutine so that a Goexit could not pop the
// library's frames; that cost about 200 ns a callback and required
// callbacks to pair their LockOSThread calls).
//
// A message is taken from a channel only to be delivered (decision 0017).
// A ChanFunc source's library side has a budget of 1: the library reports
// one message, and the source takes the next ones itself, one call into
// the library each (eq_pull), each only once the previous callback let it
// go on. An AddChanBatch source delivers a whole batch in one callback. So
// the only messages out of a channel and not yet delivered are those of
// the last report; they run first (takeSink), and when a loop has several
// channel sources the trampoline ends the library's iteration after each
// report (a stop, which leaves the other channels' messages where they
// are). What a stop leaves undelivered waits in the queue for the next
// run; a message of a source disabled before its turn waits with the
// source (held) until it is enabled again; one whose source was removed
// (or whose loop was closed) from another goroutine before its turn is
// dropped, counted by Loop.Dropped.

// evKind says what an event reports.
type evKind uint8

const (
	evFd evKind = iota
	evTimer
	evBatch
	evEOF
	evMemcg
)

// event is one report of the library, in Go memory.
type event struct {
	kind    evKind
	done    bool // ran (all but batches)
	id      uint64
	src     *C.eventq_source
	fd      int32
	revents Events
	n       uint64
	memcg   *MemcgEvent
	// A batch: its messages packed in data, their lengths, and the next
	// one to deliver (index i, at offset off).
	data []byte
	lens []int
	i    int
	off  int
}

// finished reports whether nothing of the event is left to deliver.
func (e *event) finished() bool {
	if e.kind == evBatch {
		return e.i >= len(e.lens)
	}
	return e.done
}

// rest is the number of messages not delivered (0 unless a batch).
func (e *event) rest() int {
	if e.kind == evBatch {
		return len(e.lens) - e.i
	}
	return 0
}

// sink is where the trampolines put what the library reports during a
// run_once, for the loop's goroutine (the only one that calls run_once).
// It refers to nothing that refers to the Loop: the library keeps it
// (through the sources' links), not the Loop.
type sink struct {
	ptr   *C.eventq_loop
	chans atomic.Int32 // the loop's channel sources
	evs   []event
}

// srcLink is a source's userdata in the library (through a cgo.Handle):
// its loop's sink and its id, never the Source or its callback.
type srcLink struct {
	sink      *sink
	id        uint64
	onDestroy func()
}

// stopped reports whether the run that began when the stop counter was
// seen must end (Stop, Close, a panic under Run).
func (c *loopCore) stopped(seen uint64) bool { return c.stopCount.Load() != seen }

// iterate runs one iteration: what earlier runs left (queued events, held
// messages of enabled sources), then one run_once of the library (waiting
// at most timeout, negative for ever, unless there is Go work), the
// callbacks of what it reported, then the posts. Returns the callbacks
// run.
func (c *loopCore) iterate(timeout time.Duration, seen uint64) (int, error) {
	calls := c.runQueue(seen)
	calls += c.runHeld(seen)
	if c.stopped(seen) {
		return calls, nil
	}
	ns := C.int64_t(C.EVENTQ_FOREVER)
	if timeout >= 0 {
		ns = C.int64_t(timeout)
	}
	c.inC.Store(true)
	// After inC is published: a Post or Stop either is seen here or wakes
	// the library's wait.
	if calls > 0 || c.npost.Load() > 0 || c.stopped(seen) || c.heldReady() {
		ns = 0
	}
	rc := C.eventq_loop_run_once(c.ptr, ns)
	c.inC.Store(false)
	c.woken.Store(false)
	if rc < 0 {
		return calls, errOf(rc)
	}
	c.takeSink()
	calls += c.runQueue(seen)
	calls += c.runPosts(seen)
	return calls, nil
}

// takeSink moves what the trampolines collected to the queue.
func (c *loopCore) takeSink() {
	s := c.sink
	if len(s.evs) == 0 {
		return
	}
	if c.qhead == len(c.queue) {
		c.queue, c.qhead = c.queue[:0], 0
	}
	// A channel's batch (and its end of stream) first: its messages are
	// out of the channel, and a callback of another source that closed the
	// loop or removed the source before them would drop them. Sources have
	// no order among themselves.
	for _, ev := range s.evs {
		if ev.kind == evBatch || ev.kind == evEOF {
			c.queue = append(c.queue, ev)
		}
	}
	for _, ev := range s.evs {
		if ev.kind != evBatch && ev.kind != evEOF {
			c.queue = append(c.queue, ev)
		}
	}
	clear(s.evs)
	s.evs = s.evs[:0]
}

// source returns the live source with this id, or nil.
func (c *loopCore) source(id uint64) *Source {
	c.mu.Lock()
	s := c.sources[id]
	c.mu.Unlock()
	return s
}

// runQueue runs the queued events in order until the queue is empty or the
// run must end; an event a stop interrupted stays at the head.
func (c *loopCore) runQueue(seen uint64) (calls int) {
	for c.qhead < len(c.queue) {
		ev := &c.queue[c.qhead]
		if ev.finished() {
			*ev = event{}
			c.qhead++
			continue
		}
		if c.stopped(seen) {
			return calls
		}
		s := c.source(ev.id)
		switch {
		case s == nil || s.removed():
			c.dropMsgs.Add(uint64(ev.rest()))
			*ev = event{}
			c.qhead++
		case s.off.Load():
			// Disabled since: a batch (and the end of stream after it)
			// waits with the source; fd, timer and memory events go.
			if ev.kind == evBatch || ev.kind == evEOF {
				c.hold(s, *ev)
			}
			*ev = event{}
			c.qhead++
		default:
			calls += c.deliver(s, ev, seen)
		}
	}
	clear(c.queue)
	c.queue, c.qhead = c.queue[:0], 0
	return calls
}

// hold keeps an event of a disabled source for when it is enabled again.
func (c *loopCore) hold(s *Source, ev event) {
	if len(s.held) == 0 {
		c.heldSrcs = append(c.heldSrcs, s)
	}
	s.held = append(s.held, ev)
	s.heldN.Add(int64(max(ev.rest(), 1)))
}

// dropHeld forgets a source's held events; returns the messages dropped.
func (s *Source) dropHeld() int {
	n := 0
	for i := range s.held {
		n += s.held[i].rest()
	}
	s.held = nil
	s.heldN.Store(0)
	return n
}

// heldReady reports whether an enabled source holds messages.
func (c *loopCore) heldReady() bool {
	for _, s := range c.heldSrcs {
		if !s.off.Load() || s.removed() {
			return true
		}
	}
	return false
}

// runHeld delivers the held messages of the sources enabled again, and
// drops those of removed sources.
func (c *loopCore) runHeld(seen uint64) (calls int) {
	for i := 0; i < len(c.heldSrcs); {
		s := c.heldSrcs[i]
		if s.removed() {
			c.dropMsgs.Add(uint64(s.dropHeld()))
		}
		for len(s.held) > 0 && !s.off.Load() {
			ev := &s.held[0]
			if ev.finished() {
				s.held = s.held[1:]
				continue
			}
			if c.stopped(seen) {
				return calls
			}
			before := ev.rest()
			calls += c.deliver(s, ev, seen)
			s.heldN.Add(-int64(max(before-ev.rest(), 1)))
		}
		if len(s.held) == 0 {
			s.held = nil
			s.heldN.Store(0)
			c.heldSrcs = append(c.heldSrcs[:i], c.heldSrcs[i+1:]...)
		} else {
			i++
		}
	}
	return calls
}

// deliver runs a source's callback for an event (for a batch, once per
// message until the batch ends, the run must end, or the source is
// removed or disabled). The event's position is recorded before each
// callback, so a Goexit leaves it consistent. A panic is recovered: the
// source is disabled and the panic recorded; after a Goexit the source is
// disabled with ErrGoexit and the Goexit goes on.
func (c *loopCore) deliver(s *Source, ev *event, seen uint64) (calls int) {
	c.setRunning(s)
	returned := false
	defer func() {
		c.setRunning(nil)
		if returned {
			return
		}
		if r := recover(); r != nil {
			perr := &PanicError{Value: r, Stack: debug.Stack()}
			s.fail(perr)
			c.recordPanic(perr)
			return
		}
		s.fail(ErrGoexit) // runtime.Goexit, which goes on from here
	}()
	s.publish(ev.src)
	var err error
	switch ev.kind {
	case evBatch:
		if s.batchFn != nil {
			msgs := make([][]byte, len(ev.lens)-ev.i)
			for k := range msgs {
				n := ev.lens[ev.i+k]
				msgs[k] = ev.data[ev.off : ev.off+n : ev.off+n]
				ev.off += n
			}
			ev.i, calls = len(ev.lens), 1
			err = s.batchFn(s, msgs, false)
			break
		}
		fn := s.chanFn
		for ev.i < len(ev.lens) {
			if calls > 0 && (c.stopped(seen) || s.off.Load() || s.removed()) {
				break
			}
			n := ev.lens[ev.i]
			msg := ev.data[ev.off : ev.off+n : ev.off+n]
			ev.i++
			ev.off += n
			calls++
			if err = fn(s, msg, false); err != nil {
				break
			}
		}
		// The rest of the iteration's budget, a message at a time: each is
		// taken only once the previous callback let the source go on.
		if budget := int(s.budget.Load()); err == nil && calls < budget && s.ref.acquire() {
			for err == nil && calls < budget {
				if c.stopped(seen) || s.off.Load() || s.removed() {
					break
				}
				msg, ok := s.pull()
				if !ok {
					break
				}
				calls++
				err = fn(s, msg, false)
			}
			s.srcHandle.done()
		}
	case evEOF:
		ev.done, calls = true, 1
		// The library disabled the source after its end of stream.
		s.off.Store(true)
		if s.batchFn != nil {
			err = s.batchFn(s, nil, true)
		} else {
			err = s.chanFn(s, nil, true)
		}
	case evFd:
		ev.done, calls = true, 1
		err = s.fdFn(s, int(ev.fd), ev.revents)
	case evTimer:
		ev.done, calls = true, 1
		err = s.timerFn(s, ev.n)
	case evMemcg:
		ev.done, calls = true, 1
		err = s.memcgFn(s, ev.memcg)
	}
	if err != nil {
		s.fail(err)
	}
	returned = true
	return calls
}

// runPosts runs the pending posts in order, at most 64 (posts made by
// posts wait for the next iteration), until the run must end.
func (c *loopCore) runPosts(seen uint64) (calls int) {
	for calls < 64 && c.npost.Load() > 0 && !c.stopped(seen) {
		fn := c.nextPost()
		if fn == nil {
			break
		}
		calls++
		c.runPost(fn)
	}
	return calls
}

// runPost runs a post's fn, recovering a panic as a callback's.
func (c *loopCore) runPost(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			c.recordPanic(&PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	fn()
}

// setRunning records whose callback runs (nil: none) and wakes Remove
// calls waiting for it.
func (c *loopCore) setRunning(s *Source) {
	c.mu.Lock()
	c.running = s
	if s == nil {
		c.runCond.Broadcast()
	}
	c.mu.Unlock()
}

// waitNotRunning waits until s's callback is not running, unless the
// caller is that callback (or another callback of the loop) or the wait
// would deadlock.
func (c *loopCore) waitNotRunning(s *Source) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != s || c.onLoopThread() {
		return nil
	}
	cycle, end := beginWait(c)
	defer end()
	if cycle {
		return ErrWouldDeadlock
	}
	for c.running == s && !c.freed {
		c.runCond.Wait()
	}
	return nil
}

// Waits between loops, to refuse a wait that would close a cycle. A
// goroutine running a loop (its OS thread locked, so its thread id names
// it) that waits in Close, PostWait or Remove for another loop records the
// loop it waits for; a new wait for loop L would deadlock if L's running
// goroutine waits, through such records, for the caller.
var (
	waitMu  sync.Mutex
	runners = map[int64]int{}       // thread of a running loop: runs on it
	waitFor = map[int64]*loopCore{} // thread of a running loop: the loop it waits for
)

// waitHook, if set (by the tests), runs when a loop's goroutine records
// a wait for another loop.
var waitHook atomic.Pointer[func()]

func runnerEnter(tid int64) {
	waitMu.Lock()
	runners[tid]++
	waitMu.Unlock()
}

func runnerLeave(tid int64) {
	waitMu.Lock()
	if runners[tid]--; runners[tid] <= 0 {
		delete(runners, tid)
	}
	waitMu.Unlock()
}

// beginWait records that the caller is about to wait for loop c; cycle
// reports that the wait would deadlock. end removes the record.
func beginWait(c *loopCore) (cycle bool, end func()) {
	me := int64(syscall.Gettid())
	waitMu.Lock()
	defer waitMu.Unlock()
	if runners[me] == 0 {
		return false, func() {} // not a loop's goroutine: no loop waits for it
	}
	t := c.runTid.Load()
	for steps := 0; t != 0 && steps < 1024; steps++ {
		if t == me {
			return true, func() {}
		}
		next := waitFor[t]
		if next == nil {
			break
		}
		t = next.runTid.Load()
	}
	waitFor[me] = c
	if h := waitHook.Load(); h != nil {
		(*h)()
	}
	return false, func() {
		waitMu.Lock()
		delete(waitFor, me)
		waitMu.Unlock()
	}
}

// ErrWouldDeadlock: Close (or PostWait, or Source.Remove) did not wait for
// a callback of the loop running in another goroutine, because the wait
// would deadlock: that callback waits, through this package's calls, for
// the caller, or (Close) it did not return within the loop's close wait
// (Loop.SetCloseWait). The call did its work all the same (the loop is
// closed, the source removed); only the wait was given up. Wraps
// syscall.EDEADLK.
var ErrWouldDeadlock error = &errnoError{"eventq: the wait for the loop's running callback would deadlock", syscall.EDEADLK}
