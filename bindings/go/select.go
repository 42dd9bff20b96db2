// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"weak"
)

// ErrSelectorClosed: the Selector was closed. Wraps syscall.EBADF.
var ErrSelectorClosed error = &errnoError{"eventq: selector closed", syscall.EBADF}

// selectSeq rotates the channel RecvAny tries first, so a busy channel
// cannot starve the others of a set.
var selectSeq atomic.Uint32

// selectParkHook, if set (by the tests), runs each time a goroutine is
// about to wait on a Selector (RecvAny's included).
var selectParkHook atomic.Pointer[func()]

// Selector receives from whichever of a set of channels has a message: a
// lossless select over many channels, built once and waited on many
// times. Recv takes exactly one message from one channel, and only the one
// it returns; a caller that stops (ctx done, or it just stops calling)
// leaves every other message queued in its channel.
//
//	sel, err := eventq.NewSelector(a, b, c)
//	defer sel.Close()
//	for {
//		ch, msg, err := sel.Recv(ctx)
//		switch {
//		case errors.Is(err, eventq.ErrClosed), errors.Is(err, eventq.ErrReleased):
//			sel.Remove(ch) // ch ended; go on with the others
//		case err != nil:
//			return err // ctx.Err(), or ErrSelectorClosed
//		default:
//			handle(ch, msg)
//		}
//	}
//
// # Cost
//
// The set is an epoll set of the members' receive fds, made once: Add and
// Remove are one epoll_ctl each. A Recv asks the kernel which members are
// ready (epoll_wait with no timeout, which costs the same with 2 channels
// or 2,000: the kernel keeps the ready ones on a list) and receives from
// one of them; a Recv that has to wait does so in Go's netpoller on the
// epoll set itself, which is readable while a member is. The members
// found ready are tried in the order the kernel reports them, and the
// kernel puts each reported member at the back of its list, so a busy
// channel takes its turn with the others and none starves; up to 64 ready
// members are kept from one epoll_wait for the following Recvs.
//
// # Rules
//
// All methods are safe for concurrent use. Any number of goroutines may
// Recv on one Selector: they wait in one queue, as on a Chan (see
// "Waiting" there), and each message wakes the one goroutine it goes to.
// Members may be added and removed while goroutines wait; a member added
// with messages queued wakes a waiter. A channel may also be received from
// directly, or be a member of several selectors: a message goes to
// whichever takes it first.
//
// A member closed and drained is ready, as a closed Go channel is in a
// select: Recv returns it with ErrClosed, each time, until it is removed.
// A member whose handle is released returns with ErrReleased in the same
// way; the Selector holds a reference to each member handle, so one
// released while a member is freed when it leaves the set (Remove or
// Close). Two handles of one channel (Clone) are one member: Recv reports
// the first added that is still in the set.
//
// Close ends the Selector: waiting Recvs and later calls return
// ErrSelectorClosed; the channels are not closed. A finalizer closes a
// forgotten Selector, but only as a backstop: call Close. A Selector holds
// an fd (the epoll set), and a second one, an eventfd, once a member's
// handle is released.
type Selector struct {
	q *waitq

	mu       sync.Mutex
	epfd     int
	ctl      int // eventfd that wakes whoever polls the set (a member released), or -1
	closed   bool
	oneShot  []*Chan // RecvAny's: its channels, whose references RecvAny holds
	byChan   map[*Chan]*member
	byFd     map[int]*member
	slots    []*member // by slot, the epoll data's Fd field
	gens     []int32   // each slot's generation, the epoll data's Pad field
	free     []int32
	ready    []syscall.EpollEvent // reported by the last epoll_wait, not yet tried
	readyAt  int
	events   []syscall.EpollEvent
	released []*Chan // member handles released while in the set
}

// member is one channel in a Selector: its receive fd, and the handles of
// it that were added, in order.
type member struct {
	fd      int
	slot    int32
	handles []*Chan
}

// selectorEvents is how many ready members one epoll_wait reports.
const selectorEvents = 64

// ctlSlot is the epoll data of the Selector's own eventfd.
const ctlSlot = -1

// NewSelector makes a Selector with chans as its members (Add each).
func NewSelector(chans ...*Chan) (*Selector, error) {
	s, err := newSelector()
	if err != nil {
		return nil, err
	}
	s.byChan = make(map[*Chan]*member, len(chans))
	s.byFd = make(map[int]*member, len(chans))
	runtime.SetFinalizer(s, (*Selector).Close)
	for _, c := range chans {
		if err := s.Add(c); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// newSelector makes an empty Selector, with no maps (which Add needs) and
// no finalizer.
func newSelector() (*Selector, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile puts it in the netpoller (epoll_wait
	// ignores the flag; Recv calls it with a zero timeout).
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "eventq-select")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	q := newWaitq(true, true)
	if err := q.setFile(f); err != nil {
		f.Close()
		return nil, err
	}
	s := &Selector{
		q:      q,
		epfd:   epfd,
		ctl:    -1,
		ready:  make([]syscall.EpollEvent, 0, selectorEvents),
		events: make([]syscall.EpollEvent, selectorEvents),
	}
	return s, nil
}

// Add makes c a member; adding a member again does nothing. It fails with
// ErrReleased for a released handle, ErrWrongSide for the sending end of a
// process-shared channel, an error wrapping syscall.EINVAL for nil, and
// ErrSelectorClosed.
func (s *Selector) Add(c *Chan) error {
	if c == nil {
		return syscall.EINVAL
	}
	if !c.use(refOther) { // held while c is a member
		return ErrReleased
	}
	if Side(C.eventq_chan_side(c.ptr)) == SideSend {
		c.done(refOther)
		return ErrWrongSide
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.done(refOther)
		return ErrSelectorClosed
	}
	if s.byChan[c] != nil {
		s.mu.Unlock()
		c.done(refOther)
		return nil
	}
	m := s.byFd[c.recvFd]
	if m == nil {
		var slot int32
		if n := len(s.free); n > 0 {
			slot = s.free[n-1]
			s.free = s.free[:n-1]
		} else {
			slot = int32(len(s.slots))
			s.slots = append(s.slots, nil)
			s.gens = append(s.gens, 0)
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: slot, Pad: s.gens[slot]}
		if err := syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_ADD, c.recvFd, &ev); err != nil {
			s.free = append(s.free, slot)
			s.mu.Unlock()
			c.done(refOther)
			return os.NewSyscallError("epoll_ctl", err)
		}
		m = &member{fd: c.recvFd, slot: slot}
		s.byFd[m.fd] = m
		s.slots[slot] = m
	}
	m.handles = append(m.handles, c)
	s.byChan[c] = m
	s.mu.Unlock()
	if !c.addSelector(s) {
		s.memberReleased(c)
	}
	return nil
}

// Remove takes c out of the set (messages stay in the channel) and gives
// back the Selector's reference to it. It fails with an error wrapping
// syscall.ENOENT if c is not a member, and with ErrSelectorClosed.
func (s *Selector) Remove(c *Chan) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrSelectorClosed
	}
	m := s.byChan[c]
	if m == nil {
		s.mu.Unlock()
		return syscall.ENOENT
	}
	delete(s.byChan, c)
	m.handles = dropChan(m.handles, c)
	s.released = dropChan(s.released, c)
	if len(m.handles) == 0 {
		// The fd is open: this handle is not freed before done below.
		syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_DEL, m.fd, nil)
		delete(s.byFd, m.fd)
		s.slots[m.slot] = nil
		s.gens[m.slot]++ // a stale report of the slot is not its next member's
		s.free = append(s.free, m.slot)
	}
	s.mu.Unlock()
	c.removeSelector(s)
	c.done(refOther)
	return nil
}

func dropChan(hs []*Chan, c *Chan) []*Chan {
	for i, h := range hs {
		if h == c {
			return append(hs[:i], hs[i+1:]...)
		}
	}
	return hs
}

// Len returns the number of member handles.
func (s *Selector) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byChan)
}

// Close ends the Selector (see the type's documentation) and gives back
// its references to the members. A second Close returns
// ErrSelectorClosed.
func (s *Selector) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrSelectorClosed
	}
	s.closed = true
	members := s.byChan
	oneShot := s.oneShot
	s.byChan, s.byFd, s.slots, s.released, s.oneShot = nil, nil, nil, nil, nil
	ctl := s.ctl
	s.ctl = -1
	s.mu.Unlock()
	runtime.SetFinalizer(s, nil)
	s.q.release(ErrSelectorClosed) // closes the epoll set once its poller left it
	if ctl >= 0 {
		syscall.Close(ctl)
	}
	for c := range members {
		c.removeSelector(s)
		c.done(refOther)
	}
	for _, c := range oneShot {
		c.removeSelector(s)
	}
	return nil
}

// addOneShot makes chans, to which the caller holds references until s is
// closed, the members of a new Selector s, each under its index in chans
// (RecvAny's). Of two handles of one channel, the one first from start on
// is the member. It returns the index of the channel at fault on error.
func (s *Selector) addOneShot(chans []*Chan, start int) (int, error) {
	s.mu.Lock()
	s.oneShot = chans
	for k := range chans {
		i := (start + k) % len(chans)
		c := chans[i]
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}
		// EEXIST: another handle of a channel in the set, which stands for
		// both.
		if err := syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_ADD, c.recvFd, &ev); err != nil && err != syscall.EEXIST {
			s.mu.Unlock()
			return i, os.NewSyscallError("epoll_ctl", err)
		}
	}
	s.mu.Unlock()
	for i, c := range chans {
		if !c.addSelector(s) {
			return i, ErrReleased
		}
	}
	return -1, nil
}

// addSelector notes that c is a member of s, whose memberReleased c's
// Release calls; false if c is released. c keeps a weak pointer: s holds
// c (a reference), and a forgotten Selector must not be kept from its
// finalizer by its members.
func (c *Chan) addSelector(s *Selector) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return false
	}
	if c.selectors == nil {
		c.selectors = make(map[weak.Pointer[Selector]]struct{})
	}
	c.selectors[weak.Make(s)] = struct{}{}
	return true
}

func (c *Chan) removeSelector(s *Selector) {
	c.mu.Lock()
	delete(c.selectors, weak.Make(s))
	c.mu.Unlock()
}

// memberReleased is called by c's Release: Recv reports c from now on,
// and waiting goroutines wake for it.
func (s *Selector) memberReleased(c *Chan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (s.oneShot == nil && s.byChan[c] == nil) {
		return
	}
	for _, r := range s.released {
		if r == c {
			return
		}
	}
	s.released = append(s.released, c)
	// Wake whoever polls the epoll set: an eventfd of the Selector's
	// own, made on first need.
	if s.ctl < 0 {
		fd, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if e != 0 {
			return // waiting goroutines see it at their next attempt
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: ctlSlot}
		if err := syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
			syscall.Close(int(fd))
			return
		}
		s.ctl = int(fd)
	}
	one := [8]byte{1}
	syscall.Write(s.ctl, one[:])
}

// selResult is the outcome of one Selector attempt.
type selResult struct {
	c    *Chan
	msg  []byte
	buf  []byte // RecvInto's buffer (into)
	into bool
	n    C.size_t
	rc   C.int
	err  error // ErrReleased for c, ErrSelectorClosed, or the epoll_wait error
}

// selFound is what an attempt returns when r holds an outcome.
const selFound = C.int(1)

// try is one attempt: a message (or end of stream) from one ready member,
// or -EAGAIN when none is ready (epoll_wait found none, after trying the
// ones it had reported); it then is a look for the waitq, the epoll set
// being level-true: readable iff a member's receive fd is.
func (s *Selector) try(r *selResult) C.int {
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			r.err = ErrSelectorClosed
			return selFound
		}
		if len(s.released) > 0 {
			r.c, r.err = s.released[0], ErrReleased
			s.mu.Unlock()
			return selFound
		}
		if s.readyAt == len(s.ready) {
			n, err := syscall.EpollWait(s.epfd, s.events, 0)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				s.mu.Unlock()
				r.err = os.NewSyscallError("epoll_wait", err)
				return selFound
			}
			if n == 0 {
				s.mu.Unlock()
				return eagain
			}
			s.ready = append(s.ready[:0], s.events[:n]...)
			s.readyAt = 0
		}
		ev := s.ready[s.readyAt]
		s.readyAt++
		if ev.Fd == ctlSlot {
			var b [8]byte
			syscall.Read(s.ctl, b[:])
			continue
		}
		var h *Chan
		switch {
		case s.oneShot != nil:
			h = s.oneShot[ev.Fd]
		case int(ev.Fd) >= len(s.slots) || s.slots[ev.Fd] == nil || s.gens[ev.Fd] != ev.Pad:
			continue // removed since it was reported
		default:
			h = s.slots[ev.Fd].handles[0]
		}
		if !h.use(refOther) {
			r.c, r.err = h, ErrReleased
			s.mu.Unlock()
			return selFound
		}
		s.mu.Unlock()
		var rc C.int
		if r.into {
			rc = h.tryRecvInto(r.buf, &r.n)
		} else {
			r.msg, rc = h.tryRecv()
		}
		h.done(refOther)
		if rc != eagain {
			r.c, r.rc = h, rc
			return selFound
		}
		s.mu.Lock()
	}
}

// Recv returns a message from one member and that member (see the type's
// documentation), waiting while none has one, until ctx is done: then the
// channel is nil and the error ctx.Err(); a done ctx does not stop a Recv
// that finds a message at once. A member closed and drained gives
// ErrClosed, a released one ErrReleased; after Close, ErrSelectorClosed.
//
// Cost: one epoll_wait (for up to 64 messages from as many ready members)
// and one TryRecv when a member has a message, whatever the number of
// members.
func (s *Selector) Recv(ctx context.Context) (*Chan, []byte, error) {
	var r selResult
	if err := s.do(ctx, &r); err != nil {
		return nil, nil, err
	}
	if r.err != nil {
		return r.c, nil, r.err
	}
	return r.c, r.msg, chanErr(r.rc)
}

// RecvInto is Recv into buf, as Chan.RecvInto: it returns the member and
// the message's length; a message longer than buf stays queued and the
// error is a *BufferTooSmallError. No allocation when a member has a
// message.
func (s *Selector) RecvInto(ctx context.Context, buf []byte) (*Chan, int, error) {
	r := selResult{buf: buf, into: true}
	if err := s.do(ctx, &r); err != nil {
		return nil, 0, err
	}
	if r.err != nil {
		return r.c, 0, r.err
	}
	n, err := recvIntoResult(r.rc, r.n)
	return r.c, n, err
}

// do makes attempts into r until one finds something, waiting in the
// Selector's queue in between; the error is ctx.Err() or
// ErrSelectorClosed (from the queue) only.
func (s *Selector) do(ctx context.Context, r *selResult) error {
	if s.q.hint.Load()&hintSkip == 0 {
		if s.try(r) != eagain {
			return nil
		}
		return s.wait(ctx, r, true)
	}
	return s.wait(ctx, r, false)
}

// wait is do's slow path, apart so that the fast path allocates nothing:
// the attempts of a waiting goroutine may run on the poller, into a copy
// of r.
func (s *Selector) wait(ctx context.Context, r *selResult, tried bool) error {
	w := &selResult{buf: r.buf, into: r.into}
	var hook func()
	if ph := selectParkHook.Load(); ph != nil {
		hook = *ph
	}
	_, err := s.q.wait(ctx, func() C.int { return s.try(w) }, tried, nil, hook)
	*r = *w
	return err
}

// RecvAny receives one message from whichever of chans has one, waiting
// while none has, until ctx is done. It returns the index of the channel
// it received from and the message. It takes exactly one message from one
// channel, and only the one it returns: when the caller stops (ctx done, or
// it just stops calling), every other message stays queued in its channel
// for a later receive. This is the lossless counterpart of a select over
// several Go channels and ctx.Done():
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
// RecvAny is the one-shot form of a Selector. Cost: one TryRecv per
// channel until one has a message. Only when none has does RecvAny wait:
// it then makes a Selector of the channels (an epoll set, and a syscall
// per channel), closed again when it returns. A loop that receives from
// the same channels again and again should keep a Selector instead, whose
// Recv costs the same for 2 channels or 2,000.
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
	if err := ctx.Err(); err != nil {
		return -1, nil, err
	}
	s, err := newSelector()
	if err != nil {
		return -1, nil, err
	}
	defer s.Close()
	if i, err := s.addOneShot(chans, start); err != nil {
		return i, nil, err
	}
	var r selResult
	if err := s.do(ctx, &r); err != nil {
		return -1, nil, err
	}
	i = indexOf(chans, r.c, start)
	if r.err != nil {
		return i, nil, r.err
	}
	return i, r.msg, chanErr(r.rc)
}

func doneAll(chans []*Chan) {
	for _, c := range chans {
		c.done(refOther)
	}
}

// indexOf returns the index of c in chans, the first from start on.
func indexOf(chans []*Chan, c *Chan, start int) int {
	for k := range chans {
		if i := (start + k) % len(chans); chans[i] == c {
			return i
		}
	}
	return -1
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
