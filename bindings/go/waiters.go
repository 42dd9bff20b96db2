// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <stddef.h>
import "C"

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// waitq is where the goroutines wait that found one side of a Chan (or a
// Selector) unable to proceed: receivers on an empty channel, senders on a
// full one. One goroutine at a time waits in the netpoller on the side's
// fd; every other waits on a Go channel of its own, in a FIFO queue.
//
// A goroutine that finds nobody waiting polls the fd itself, its own
// attempt as RawConn.Read's function, as a lone waiter always did: it
// wakes straight from the netpoller. Those that come while it polls
// queue, and when it leaves it starts the poller for them: a goroutine of
// the queue's own, which does not take messages for itself: on each event
// it makes the attempts (op) of the waiters at the head of the queue, on
// their behalf, and hands each its outcome, until one is refused; it ends
// when the queue is empty. So one event wakes one goroutine, the poller,
// and each message wakes the one waiter it goes to, however many wait:
// Go's netpoller cannot register an fd with EPOLLEXCLUSIVE (goroutines
// polling one eventfd, each through a dup of its own, all wake on every
// write), so the queue does in Go what EPOLLEXCLUSIVE and the consumer
// hand-on (D4) do for C consumers.
//
// Why the poller is a goroutine of its own and not the waiter at the
// head: RawConn.Read forgets the readiness it had seen when it starts
// (pollDesc.prepareRead), so a goroutine that starts waiting on the fd
// must look at the channel first, and a waiter that took a message must
// leave the netpoller to return it; a poller taking turns among the
// waiters would so make a second attempt for each message. The poller
// stays in one RawConn.Read while there are waiters, and that Read keeps
// every event that comes while the poller is busy. Why the attempt runs on
// the poller: a waiter whose context ends then leaves the queue without a
// trace (no wake-up was given to it, so none is lost), or, if its attempt
// is running, waits for it and returns what it took.
//
// The rule that no waiter sleeps through a message (D9 on the binding's
// side): the one polling parks only (a) when nobody else waits, or (b)
// with a promise: after a look at the channel made since its Read began
// and since the last attempt that succeeded, a look that found nothing to
// do. A look is an attempt refused with -EAGAIN (after which the library
// owes the fd an event no later than when an attempt would succeed, D9),
// or, where the fd is level-true (the receive fd: readable iff messages
// are pending, D4), finding the fd not readable (any message after that
// raises it, an eventfd write, which is an event). Every event after the
// look reaches the Read, which makes the head's attempt again. A waiter
// whose attempt succeeded may have left messages behind (the fd stayed
// up, no new event): that is the hand-on of D4, done by the poller
// itself, which looks again before it parks. A poller that starts, and a
// waiter that polls alone, look first (their Read has just begun).
//
// While a promise holds, a receiver skips its own attempt (the hint's skip
// bit) and queues at once: its attempt would be refused, and the poller
// makes one for it after the next event. So a pool of idle workers costs
// one receive attempt per message, not one per worker.
type waitq struct {
	_ [64]byte
	// hint is read by the fast paths: hintSkip while a promise holds.
	hint atomic.Uint32
	_    [60]byte

	mu         sync.Mutex
	f          *os.File // the fd waited on, in the netpoller
	conn       syscall.RawConn
	head, tail *waiter
	running    *waiter // the waiter whose attempt the poller is making
	polling    bool    // a poller goroutine runs (serve)
	alone      bool    // a waiter polls the file itself (waitAlone)
	promise    bool    // the one polling parks (or may) with a promise; see above
	released   bool
	relErr     error
	skipOK     bool // waiters may skip their first attempt while a promise holds
	levelOK    bool // the fd is level-true: a not-readable fd is a look
}

const hintSkip = 1

type waiterState uint8

const (
	wQueued waiterState = iota
	wRunning
	wDone
)

// waiter is one goroutine waiting in a waitq.
type waiter struct {
	op         func() C.int
	rc         C.int
	err        error
	done       chan struct{} // one token when the poller finished the waiter
	prev, next *waiter
	state      waiterState
	cancelled  bool // ctx ended while its attempt was running
}

var waiterPool = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

func getWaiter(op func() C.int) *waiter {
	w := waiterPool.Get().(*waiter)
	w.op = op
	return w
}

// putWaiter recycles w, whose done channel is empty.
func putWaiter(w *waiter) {
	*w = waiter{done: w.done}
	waiterPool.Put(w)
}

func newWaitq(skipOK, levelOK bool) *waitq {
	return &waitq{skipOK: skipOK, levelOK: levelOK}
}

// publish stores the hint; q.mu is held.
func (q *waitq) publish() {
	var h uint32
	if q.promise && q.skipOK {
		h = hintSkip
	}
	if q.hint.Load() != h {
		q.hint.Store(h)
	}
}

func (q *waitq) push(w *waiter) {
	w.state = wQueued
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waitq) pushFront(w *waiter) {
	w.state = wQueued
	w.prev, w.next = nil, q.head
	if q.head != nil {
		q.head.prev = w
	} else {
		q.tail = w
	}
	q.head = w
}

func (q *waitq) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// finish hands w its outcome; q.mu is held.
func (q *waitq) finish(w *waiter, rc C.int, err error) {
	w.rc, w.err, w.state = rc, err, wDone
	w.done <- struct{}{}
}

// setFile makes f (non-blocking, in the netpoller) the fd the poller
// waits on; q.mu is held.
func (q *waitq) setFile(f *os.File) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	q.f, q.conn = f, conn
	return nil
}

// wait runs op, a non-blocking attempt, until it returns something other
// than -EAGAIN, and returns that; in between the goroutine waits. tried
// says whether the caller just made an attempt of its own (refused). ctx
// ends the wait with ctx.Err(), unless op is running then: its outcome is
// returned (nothing op took is lost); a done ctx still lets one attempt
// run if the caller made none. open makes the file to poll when the queue
// has none yet; hook, if not nil, runs before the goroutine blocks.
//
// A goroutine that finds nobody waiting polls the fd itself (alone); the
// ones that come while it does queue, and when it leaves it starts the
// poller for them. So a lone waiter wakes straight from the netpoller, and
// a queue has a poller goroutine only while it has waiters.
func (q *waitq) wait(ctx context.Context, op func() C.int, tried bool,
	open func() (*os.File, error), hook func()) (C.int, error) {
	if err := ctx.Err(); err != nil {
		if !tried {
			if rc := op(); rc != eagain {
				return rc, nil
			}
		}
		return 0, err
	}
	q.mu.Lock()
	for !q.released && !q.polling && !q.alone && q.f == nil {
		q.mu.Unlock()
		f, err := open()
		if err != nil {
			return 0, err
		}
		q.mu.Lock()
		if q.f != nil || q.released {
			f.Close()
		} else if err := q.setFile(f); err != nil {
			q.mu.Unlock()
			f.Close()
			return 0, err
		}
	}
	if q.released {
		err := q.relErr
		q.mu.Unlock()
		return 0, err
	}
	if !q.polling && !q.alone {
		q.alone = true
		q.promise = false
		q.publish()
		q.mu.Unlock()
		return q.waitAlone(ctx, op, hook)
	}
	// The poller will look before it parks (it is busy, or others wait),
	// or has parked with a promise that covers this waiter; or the
	// goroutine polling alone will start the poller when it leaves.
	w := getWaiter(op)
	q.push(w)
	q.mu.Unlock()
	if hook != nil {
		hook()
	}
	if done := ctx.Done(); done == nil {
		<-w.done
	} else {
		select {
		case <-w.done:
		case <-done:
			if q.cancel(w) {
				return 0, ctx.Err()
			}
		}
	}
	rc, err := w.rc, w.err
	putWaiter(w)
	if err == nil && rc == eagain {
		// Cancelled while its attempt ran, which was refused.
		return 0, ctx.Err()
	}
	return rc, err
}

// waitAlone is wait for the goroutine that polls alone: it waits in the
// netpoller on the queue's file, its own attempt as RawConn.Read's
// function, which runs first (a look, after which every event reaches the
// Read) and after each event; ctx ends the wait through a read deadline.
// op never runs after the wait ended, so nothing it took is lost.
func (q *waitq) waitAlone(ctx context.Context, op func() C.int, hook func()) (C.int, error) {
	unwatch := deadlineWhenDone(ctx, q.f)
	var rc C.int
	first := true
	err := q.conn.Read(func(uintptr) bool {
		if !first {
			q.setPromise(false) // an event: a message may be there
		}
		first = false
		if rc = op(); rc != eagain {
			return true
		}
		q.setPromise(true)
		if hook != nil {
			hook()
		}
		return false
	})
	unwatch() // before another goroutine polls the file
	q.mu.Lock()
	q.alone, q.promise = false, false
	if q.head != nil && !q.released {
		q.polling = true
		go q.serve(q.conn)
	}
	q.publish()
	relErr := q.relErr
	q.mu.Unlock()
	switch {
	case err == nil:
		return rc, nil
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return 0, ctx.Err()
	case relErr != nil:
		return 0, relErr // release closed the file
	default:
		return 0, err
	}
}

func (q *waitq) setPromise(p bool) {
	q.mu.Lock()
	q.promise = p
	q.publish()
	q.mu.Unlock()
}

// cancel takes w, whose context ended, out of the queue (true), or, when
// the poller has taken it, waits for the outcome of its attempt (false;
// a refusal then stands for the context's end).
func (q *waitq) cancel(w *waiter) bool {
	q.mu.Lock()
	if w.state == wQueued {
		q.remove(w)
		q.mu.Unlock()
		putWaiter(w)
		return true
	}
	if w.state == wRunning {
		w.cancelled = true
	}
	q.mu.Unlock()
	<-w.done
	return false
}

// serve is the poller: it waits on the queue's file until the queue is
// released or empty.
func (q *waitq) serve(conn syscall.RawConn) {
	err := conn.Read(q.step)
	if err == nil {
		return
	}
	// The file was closed (release) or failed: nobody polls any more.
	q.mu.Lock()
	q.polling, q.promise = false, false
	if !q.released {
		for w := q.head; w != nil; {
			next := w.next
			q.finish(w, 0, err)
			w = next
		}
		q.head, q.tail = nil, nil
	}
	q.publish()
	q.mu.Unlock()
}

// step runs in the poller's RawConn.Read, first when it starts and then
// after each event: it makes the head waiter's attempt until one is
// refused or a look finds nothing to do (then false: park), or nobody
// waits any more (true: the poller ends).
func (q *waitq) step(fd uintptr) bool {
	q.mu.Lock()
	q.promise = false
	served := false
	// A waiter whose message is held back until the poller has looked
	// again (see the hand-on below); q.mu is held when it is handed.
	var held *waiter
	var heldRC C.int
	handHeld := func() {
		if held != nil {
			q.finish(held, heldRC, nil)
			held = nil
		}
	}
	for {
		w := q.head
		if q.released || w == nil {
			handHeld()
			q.polling = false
			q.publish()
			q.mu.Unlock()
			return true
		}
		if q.promise {
			handHeld()
			q.publish()
			q.mu.Unlock()
			return false
		}
		q.remove(w)
		w.state = wRunning
		q.running = w
		q.publish()
		q.mu.Unlock()
		rc := w.op()
		q.mu.Lock()
		if rc == eagain {
			q.running = nil
			switch {
			case w.cancelled:
				q.finish(w, eagain, nil)
			case q.released:
				q.finish(w, 0, q.relErr)
			default:
				q.pushFront(w)
			}
			q.promise = true
			continue
		}
		if q.head != nil && q.levelOK && rc >= 0 && !served {
			// The hand-on: did the message taken leave others behind? The
			// first one after an event often is the only one (one event
			// per message when they come one at a time); if it is not,
			// the next attempts go ahead without asking again. Asked
			// before w wakes, so that w, back for the next message, finds
			// the promise and queues without an attempt of its own.
			q.publish()
			q.mu.Unlock()
			up := readable(int(fd))
			q.mu.Lock()
			if !up {
				q.promise = true
				q.publish()
			} else {
				// Up: messages left, or only a lowering not yet done (the
				// receive that empties the queue leaves it to a sender
				// that holds the doorbell lock while it writes the fd).
				// The next head's attempt tells; w gets its message after
				// it, so that w, back for another, finds the promise a
				// refusal makes rather than making a refused attempt too.
				q.running = nil
				held, heldRC = w, rc
				served = true
				continue
			}
		}
		q.running = nil
		handHeld()
		q.finish(w, rc, nil)
		served = true
	}
}

// release ends the queue: its waiters return err, later ones too, and the
// poller ends (its file is closed).
func (q *waitq) release(err error) {
	q.mu.Lock()
	if q.released {
		q.mu.Unlock()
		return
	}
	q.released, q.relErr = true, err
	for w := q.head; w != nil; {
		next := w.next
		q.finish(w, 0, err)
		w = next
	}
	q.head, q.tail = nil, nil
	q.promise = false
	q.publish()
	f := q.f
	q.mu.Unlock()
	if f != nil {
		f.Close() // wakes the poller; returns once it has left the file
	}
}

// aLongTimeAgo is a deadline in the past: setting it wakes a waiter now.
var aLongTimeAgo = time.Unix(1, 0)

// deadlineWhenDone makes reads of f fail with os.ErrDeadlineExceeded once
// ctx is done (context.AfterFunc sets a deadline in the past). The
// function it returns ends the watch; if the deadline was set (or is being
// set), it waits for that and clears it.
func deadlineWhenDone(ctx context.Context, f *os.File) (unwatch func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		f.SetReadDeadline(aLongTimeAgo)
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
			f.SetReadDeadline(time.Time{})
		}
	}
}

// readable reports whether fd is readable now (ppoll(2) with a zero
// timeout); true also when it cannot tell.
func readable(fd int) bool {
	pfd := struct {
		fd      int32
		events  int16
		revents int16
	}{fd: int32(fd), events: 0x1 /* POLLIN */}
	var ts syscall.Timespec
	n, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e != 0 || n != 0
}
