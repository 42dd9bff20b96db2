// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// selectSeq rotates the channel RecvAny tries first, so a busy channel
// cannot starve the others of a set.
var selectSeq atomic.Uint32

// selectParkHook, if set (by the tests), runs each time RecvAny is about
// to park in the netpoller.
var selectParkHook atomic.Pointer[func()]

// RecvAny receives one message from whichever of chans has one, waiting
// in the netpoller while none has, until ctx is done. It returns the index
// of the channel it received from and the message. It takes exactly one
// message from one channel, and only the one it returns: when the caller
// stops (ctx done, or it just stops calling), every other message stays
// queued in its channel for a later receive. This is the lossless
// counterpart of a select over several Go channels and ctx.Done():
//
//	for len(chans) > 0 {
//		i, msg, err := eventq.RecvAny(ctx, chans...)
//		switch {
//		case errors.Is(err, eventq.ErrClosed):
//			chans = slices.Delete(chans, i, i+1) // chans[i] ended
//		case err != nil:
//			return err // ctx.Err(), or ErrReleased for chans[i]
//		default:
//			handle(i, msg)
//		}
//	}
//
// For a timer, give ctx a deadline (context.WithTimeout). A channel
// closed and drained is ready, as a closed Go channel is in a select:
// RecvAny returns its index with ErrClosed (drop it from the set to go on
// with the others). A released channel gives its index and ErrReleased, a
// nil one its index and an error wrapping syscall.EINVAL; so does an empty
// chans, with index -1. When ctx is done the index is -1 and the error
// ctx.Err(); a done ctx does not stop a RecvAny that finds a message at
// once. Channels are tried in turn, starting from a different one at each
// call, so none of them starves the others.
//
// Cost: one TryRecv per channel until one has a message. Only when none
// has does RecvAny wait: it then builds an epoll set of the channels'
// receive fds (one fd, registered in the netpoller, and a syscall per
// channel), closed again when it returns.
func RecvAny(ctx context.Context, chans ...*Chan) (int, []byte, error) {
	if len(chans) == 0 {
		return -1, nil, syscall.EINVAL
	}
	for i, c := range chans {
		if c == nil {
			doneAll(chans[:i])
			return i, nil, syscall.EINVAL
		}
		if !c.use(refOther) {
			doneAll(chans[:i])
			return i, nil, ErrReleased
		}
	}
	defer doneAll(chans)
	start := int(selectSeq.Add(1) % uint32(len(chans)))
	i, msg, rc := tryRecvAny(chans, start)
	if rc != eagain {
		return i, msg, chanErr(rc)
	}
	return recvAnyWait(ctx, chans, start)
}

func doneAll(chans []*Chan) {
	for _, c := range chans {
		c.done(refOther)
	}
}

// tryRecvAny tries each channel once, from start on, and returns the first
// outcome other than -EAGAIN (or -EAGAIN if every channel was empty).
func tryRecvAny(chans []*Chan, start int) (int, []byte, C.int) {
	for k := range chans {
		i := (start + k) % len(chans)
		if msg, rc := chans[i].tryRecv(); rc != eagain {
			return i, msg, rc
		}
	}
	return -1, nil, eagain
}

// recvAnyWait parks in the netpoller on an epoll set of the channels'
// receive fds. The netpoller is edge-triggered on the set's fd, which is
// woken by every eventfd write to a fd in the set; the library owes each
// channel that refused a receive such a write no later than when a receive
// would succeed, so a message is never left unnoticed. As in Chan.wait,
// the try function never runs after the wait ended: nothing it took is
// lost.
func recvAnyWait(ctx context.Context, chans []*Chan, start int) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return -1, nil, err
	}
	w, bad, err := newSelectWaiter(chans)
	if err != nil {
		return bad, nil, err
	}
	defer w.close(chans)
	unwatch := deadlineWhenDone(ctx, w.f)
	var (
		i   = -1
		msg []byte
		rc  C.int
	)
	rerr := w.conn.Read(func(uintptr) bool {
		if i, msg, rc = tryRecvAny(chans, start); rc != eagain {
			return true
		}
		if h := selectParkHook.Load(); h != nil {
			(*h)()
		}
		return false
	})
	unwatch()
	switch {
	case rerr == nil:
		return i, msg, chanErr(rc)
	case errors.Is(rerr, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return -1, nil, ctx.Err()
	}
	// Release of one of the channels closed the set's file.
	for k, c := range chans {
		if c.ref.closed() {
			return k, nil, ErrReleased
		}
	}
	return -1, nil, rerr
}

// newSelectWaiter makes the epoll set of chans' receive fds as a file in
// the netpoller, registered with every channel so that releasing one of
// them wakes the wait (as it wakes its own waiters). On failure it
// returns the index of the channel at fault, or -1.
func newSelectWaiter(chans []*Chan) (*waiter, int, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, -1, os.NewSyscallError("epoll_create1", err)
	}
	for i, c := range chans {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}
		// EEXIST: two handles of one channel share its fd.
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, c.recvFd, &ev); err != nil && err != syscall.EEXIST {
			syscall.Close(epfd)
			return nil, i, os.NewSyscallError("epoll_ctl", err)
		}
	}
	// Non-blocking, so that os.NewFile puts it in the netpoller (epoll_wait
	// ignores the flag; the set is never waited on but through the poller).
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, -1, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "eventq-select")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, -1, err
	}
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, -1, err
	}
	w := &waiter{f: f, conn: conn}
	for i, c := range chans {
		c.mu.Lock()
		released := c.released
		if !released {
			c.files[w] = struct{}{}
		}
		c.mu.Unlock()
		if released {
			w.close(chans[:i])
			return nil, i, ErrReleased
		}
	}
	return w, -1, nil
}

// close unregisters the set from chans and closes it.
func (w *waiter) close(chans []*Chan) {
	for _, c := range chans {
		c.mu.Lock()
		if c.files != nil {
			delete(c.files, w)
		}
		c.mu.Unlock()
	}
	w.f.Close()
}
