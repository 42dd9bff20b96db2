// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

/*
#include <eventq.h>
*/
import "C"

import (
	"context"
	"errors"
	"iter"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Waiting on a memory watch without a Loop: MemcgWatch.Next and Events.
//
// A watch's events are waited for in Go's netpoller: no OS thread blocks.
// The C library gives each watch an fd that is readable (POLLIN) while it
// has something to read, the one thing the netpoller waits for, and a
// read, eventq_memcg_watch_read, that takes the flags of the poll that
// reported the fd readable.
//
// One goroutine per watch, its pump, started by the first Next, waits in
// the netpoller and reads. It stays inside one SyscallConn().Read for the
// watch's life because of PSI triggers: the kernel keeps a firing as a
// flag that the first poll of the trigger's file clears, and the
// netpoller's poll (of an epoll holding the file) is that first poll,
// whether or not a goroutine waits. Its report is all that is left of the
// firing, and a SyscallConn().Read discards a report that came before it
// started; a Read that never ends misses none. For the same reason the
// netpoller polls an epoll of the pump's own, registered while empty, and
// the watch's fd goes into it only inside that Read, right after the pump
// read what was pending (an EPOLL_CTL_ADD polls the fd: a firing pending
// then would be taken and reported to no one).

// ErrWatchClosed: the MemcgWatch was closed (Close, or its finalizer);
// goroutines waiting in Next wake with it. Wraps syscall.EBADF.
var ErrWatchClosed error = &errnoError{"eventq: memcg watch closed", syscall.EBADF}

// ErrWatchEnded: the watch's cgroup was removed, and its last event,
// MemRemoved, was delivered: nothing more will come. Wraps syscall.ENOENT.
var ErrWatchEnded error = &errnoError{"eventq: memcg watch ended: its cgroup was removed", syscall.ENOENT}

// liveMemcgPumps counts the pump goroutines not yet ended (for the tests).
var liveMemcgPumps atomic.Int64

// memcgResult is one thing the pump hands to a Next: an event or an error.
type memcgResult struct {
	ev  *MemcgEvent
	err error
}

// memcgPump waits for a watch's events in the netpoller and hands each to
// one Next. It owns the C watch and frees it when it ends; it holds no
// reference to the MemcgWatch, whose finalizer can then run. Its fields
// are the pump goroutine's, but for the channels, and end, which others
// read once exited is closed.
type memcgPump struct {
	ptr    *C.eventq_memcg_watch
	wfd    int      // the watch's fd (owned by the C watch)
	ep     *os.File // the pump's epoll, in the netpoller
	conn   syscall.RawConn
	events chan memcgResult // unbuffered: one event at a time, to one Next
	done   chan struct{}    // closed by Close
	exited chan struct{}    // closed once the pump freed the watch
	end    error            // why it ended (set before exited is closed)
}

// newMemcgPump makes the pump of the C watch p: an empty epoll of its
// own, registered with the netpoller.
func newMemcgPump(p *C.eventq_memcg_watch) (*memcgPump, error) {
	wfd := int(C.eventq_memcg_watch_fd(p))
	if wfd < 0 {
		return nil, memcgErr("memcg watch fd", C.int(wfd), "")
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		syscall.Close(ep)
		return nil, os.NewSyscallError("fcntl O_NONBLOCK", err)
	}
	// Non-blocking, so os.NewFile puts it in the netpoller; a zero
	// deadline fails if that did not happen.
	f := os.NewFile(uintptr(ep), "eventq-memcg")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &memcgPump{
		ptr:    p,
		wfd:    wfd,
		ep:     f,
		conn:   conn,
		events: make(chan memcgResult),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}, nil
}

// read reads the watch once: an event, nil at EAGAIN, or the error that
// ends the pump.
func (p *memcgPump) read(revents C.uint32_t) (*MemcgEvent, error) {
	var ev *C.eventq_memcg_event
	rc, text := cCall(func() C.int { return C.eventq_memcg_watch_read(p.ptr, revents, &ev) })
	switch {
	case rc == 0:
		return memcgEventOf(ev), nil
	case rc == -C.int(syscall.EAGAIN):
		return nil, nil
	case rc == -C.int(syscall.ENOENT):
		return nil, ErrWatchEnded // the removal was read already
	default:
		return nil, memcgErr("reading the memcg watch", rc, text)
	}
}

// deliver hands r to a Next; false if the watch was closed first.
func (p *memcgPump) deliver(r memcgResult) bool {
	select {
	case p.events <- r:
		return true
	case <-p.done:
		return false
	}
}

// run is the pump's goroutine: inside one RawRead until the watch ends or
// is closed, then it closes its epoll and frees the watch.
func (p *memcgPump) run() {
	first := true
	stop := func(err error) bool {
		if err != nil && p.deliver(memcgResult{err: err}) {
			p.end = err
		}
		return true
	}
	// The fd given to the function is the pump's epoll (never ask p.ep for
	// its Fd: that would make it blocking).
	rerr := p.conn.Read(func(epfd uintptr) bool {
		// Every call but the first follows a netpoller report: EVENTQ_IN,
		// which for PSI is the firing that report's poll took.
		revents := C.uint32_t(C.EVENTQ_IN)
		if first {
			first = false
			revents = 0
			// Read what is pending, then put the watch's fd in the epoll
			// the netpoller waits on: from here on every report reaches
			// this function (the RawRead has started).
			var pending []*MemcgEvent
			var failed error
			for {
				ev, err := p.read(0)
				if err != nil {
					failed = err
					break
				}
				if ev == nil {
					break
				}
				pending = append(pending, ev)
				if ev.Kind == MemRemoved {
					break
				}
			}
			if failed == nil && (len(pending) == 0 || pending[len(pending)-1].Kind != MemRemoved) {
				ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
				if err := syscall.EpollCtl(int(epfd), syscall.EPOLL_CTL_ADD, p.wfd, &ev); err != nil {
					failed = os.NewSyscallError("epoll_ctl", err)
				}
			}
			for _, ev := range pending {
				if !p.deliver(memcgResult{ev: ev}) || ev.Kind == MemRemoved {
					return true
				}
			}
			if failed != nil {
				return stop(failed)
			}
		}
		// Read until EAGAIN: the netpoller reports each change once.
		for {
			ev, err := p.read(revents)
			revents = 0
			if err != nil {
				return stop(err)
			}
			if ev == nil {
				return false
			}
			if !p.deliver(memcgResult{ev: ev}) || ev.Kind == MemRemoved {
				return true
			}
		}
	})
	_ = rerr // a deadline set by Close, or nil: the pump stops either way
	p.ep.Close()
	C.eventq_memcg_watch_free(p.ptr)
	if p.end == nil {
		p.end = ErrWatchEnded
	}
	liveMemcgPumps.Add(-1) // before exited: Close returns after both
	close(p.exited)
}

// stop ends the pump (Close): wakes a Next waiting and the pump, whether
// it waits in the netpoller or to deliver, and waits until it freed the
// watch.
func (p *memcgPump) stop() {
	close(p.done)
	p.ep.SetReadDeadline(aLongTimeAgo)
	<-p.exited
}

// start returns the watch's pump, starting it on the first call.
func (w *MemcgWatch) start() (*memcgPump, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, ErrWatchClosed
	case w.pump != nil:
		return w.pump, nil
	case w.ptr == nil:
		return nil, ErrWatchUsed // Loop.AddMemcg took it
	}
	p, err := newMemcgPump(w.ptr)
	if err != nil {
		return nil, err
	}
	w.ptr, w.pump = nil, p
	liveMemcgPumps.Add(1)
	go p.run()
	return p, nil
}

// Next returns the watch's next event, waiting for it in Go's netpoller
// (no OS thread blocks) until there is one or ctx is done (ctx.Err()). An
// event already there is returned also when ctx is done.
//
// The last event of a watch whose cgroup is removed is MemRemoved; Next
// then returns ErrWatchEnded. It returns ErrWatchClosed once the watch is
// closed (goroutines waiting in Next wake with it), ErrWatchUsed if
// Loop.AddMemcg took the watch, and the error of a failed read of the
// watch, after which it ends. Several goroutines may call Next at once:
// each event goes to one of them.
//
// Counts are the kernel's: while no Next asks, the watch holds one event
// and the kernel keeps counting, so the next Count of a cgroup v1 watch
// covers every notification since (none is merged away); a PSI trigger is
// a flag in the kernel, so its firings merge into one MemPSI event (at
// most one per window).
//
// The first Next starts the watch's waiting: one goroutine that waits in
// the netpoller and reads (see Close), and an epoll fd. A watch that Next
// started cannot be added to a Loop (ErrWatchUsed).
func (w *MemcgWatch) Next(ctx context.Context) (*MemcgEvent, error) {
	if w == nil {
		return nil, syscall.EINVAL
	}
	p, err := w.start()
	if err != nil {
		return nil, err
	}
	select {
	case r := <-p.events:
		return r.ev, r.err
	default:
	}
	select {
	case r := <-p.events:
		return r.ev, r.err
	case <-p.done:
		return nil, ErrWatchClosed
	case <-p.exited:
		if w.isClosed() {
			return nil, ErrWatchClosed
		}
		return nil, p.end
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *MemcgWatch) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// Events returns an iterator over the watch's events, for a range loop,
// and a function that reports why the range ended, as Chan.All does:
//
//	events, errf := w.Events(ctx)
//	for ev := range events {
//		handle(ev)
//	}
//	if err := errf(); err != nil {
//		return err // ctx.Err(), ErrWatchClosed, a failed read
//	}
//
// The range ends after MemRemoved, the last event of a watch whose cgroup
// was removed (errf returns nil), or when Next fails (errf returns its
// error). A system-wide PSI trigger never ends on its own. Breaking out of
// the loop loses nothing: each step takes the event it yields, and a later
// range or Next continues with the next one. errf reports the last range
// over events: call it after the loop, from the goroutine that ranged.
func (w *MemcgWatch) Events(ctx context.Context) (events iter.Seq[*MemcgEvent], errf func() error) {
	var err error
	events = func(yield func(*MemcgEvent) bool) {
		err = nil
		for {
			ev, e := w.Next(ctx)
			if e != nil {
				if !errors.Is(e, ErrWatchEnded) {
					err = e
				}
				return
			}
			if !yield(ev) || ev.Kind == MemRemoved {
				return
			}
		}
	}
	return events, func() error { return err }
}

// closeWatch is MemcgWatch.Close: the C watch is freed by its pump if
// Next started one, else here.
func (w *MemcgWatch) closeWatch() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	p, ptr := w.pump, w.ptr
	w.ptr = nil
	w.mu.Unlock()
	runtime.SetFinalizer(w, nil)
	if p != nil {
		p.stop()
	} else if ptr != nil {
		C.eventq_memcg_watch_free(ptr)
	}
}
