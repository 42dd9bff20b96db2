// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

/*
#include <stdint.h>
#include <eventq.h>

// The channel calls never call back into Go and keep no pointer past their
// return, which lets cgo skip work and lets Go buffers stay on the stack.
// The hot paths go through the eq_* wrappers below, which take the handle
// as a uintptr_t and buffers as typed pointers (uint8_t *, size_t *): cgo
// checks every argument that may point to Go pointers on each call
// (runtime.cgoCheckPointer: a void *, or a pointer to an incomplete struct
// such as eventq_chan), but not an integer or a pointer to bytes or
// integers. The handle is C memory, so passing it as an integer is safe.
#cgo noescape eq_send
#cgo nocallback eq_send
#cgo noescape eq_recv
#cgo nocallback eq_recv
#cgo noescape eq_recv_batch
#cgo nocallback eq_recv_batch
#cgo noescape eq_send_packed
#cgo nocallback eq_send_packed
#cgo noescape eventq_chan_get_stats
#cgo nocallback eventq_chan_get_stats
#cgo noescape eventq_chan_free_final

static inline int eq_send(uintptr_t ch, const uint8_t *data, size_t len) {
	return eventq_chan_send((const eventq_chan *)ch, data, len, 0);
}

static inline int eq_recv(uintptr_t ch, uint8_t *buf, size_t cap, size_t *len) {
	return eventq_chan_recv((const eventq_chan *)ch, buf, cap, len, 0);
}

static inline int eq_recv_batch(uintptr_t ch, uint8_t *buf, size_t cap,
                                size_t *lens, size_t max) {
	return eventq_chan_recv_batch((const eventq_chan *)ch, buf, cap, lens, max, 0);
}

enum { EQ_SEND_CHUNK = 128 };

// Sends count messages packed back to back at base (lens[i] bytes each)
// with eventq_chan_send_batch, without waiting, EQ_SEND_CHUNK at a time so
// the eventq_buf array lives on the C stack (Go memory handed to C may not
// hold Go pointers). Returns how many were queued, or the error of the
// first call when it queued nothing.
static int eq_send_packed(uintptr_t handle, const uint8_t *base,
                          const size_t *lens, size_t count) {
	const eventq_chan *ch = (const eventq_chan *)handle;
	eventq_buf bufs[EQ_SEND_CHUNK];
	size_t done = 0, off = 0;
	while (done < count) {
		size_t n = count - done, o = off;
		if (n > EQ_SEND_CHUNK)
			n = EQ_SEND_CHUNK;
		for (size_t i = 0; i < n; i++) {
			bufs[i].data = base + o;
			bufs[i].len = lens[done + i];
			o += lens[done + i];
		}
		int rc = eventq_chan_send_batch(ch, bufs, n, 0);
		if (rc < 0)
			return done ? (int)done : rc;
		for (int i = 0; i < rc; i++)
			off += lens[done + (size_t)i];
		done += (size_t)rc;
		if ((size_t)rc < n)
			break;
	}
	return (int)done;
}
*/
import "C"

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
	"weak"
)

const (
	eagain   = -C.int(syscall.EAGAIN)
	emsgsize = -C.int(syscall.EMSGSIZE)
)

// liveChans counts Chan handles not yet freed (for the tests).
var liveChans atomic.Int64

// Chan is a handle to a libeventq channel: a bounded multi-producer,
// multi-consumer queue of byte messages with the delivery contract of the C
// library (every accepted message received exactly once, whole, in each
// producer's order; nothing lost on any error path).
//
// All methods are safe for concurrent use by any number of goroutines.
//
// # Waiting
//
// Send on a full channel and Recv on an empty one wait without blocking an
// OS thread, and any number of goroutines may wait on one handle at once,
// each with its own context; a context ends a wait with ctx.Err(), and a
// message is never taken and then dropped because of a cancellation.
//
// Each side of a handle (receiving, sending) has one queue of waiting
// goroutines, and only one goroutine at a time polls the side's fd in Go's
// netpoller. A goroutine that waits alone polls it itself. Those that come
// while one waits queue, and then the poller, a goroutine of the handle
// that runs while the queue is not empty, polls for them: on each event it
// makes the attempts of the goroutines at the head of the queue, oldest
// first, on their behalf, and wakes each with what its attempt got, until
// one is refused. So an event wakes the poller alone, and a message wakes
// the one goroutine it is for, however many wait: 64 idle workers on one
// channel cost about one receive attempt per message (without the queue
// each goroutine would poll a dup of the fd of its own, and every one of
// them would wake for each message, since the netpoller cannot register
// an fd with EPOLLEXCLUSIVE). A goroutine that took a message may leave
// others behind; the poller then looks again before it parks (the hand-on
// of D4), and close (D6) reaches every waiter, each attempt returning
// ErrClosed. A goroutine whose context ends leaves the queue at once; if
// its attempt is running just then, it waits for it and returns what it
// took.
//
// A call that finds a message (or room) never queues: it costs one cgo
// call as it would alone. While goroutines wait on an empty channel and
// the poller has looked since the last message, a new Recv joins the queue
// without an attempt of its own (it would be refused). Waiting goroutines
// are served in the order they came; a call that finds a message takes it
// even while others wait. C threads, loops and other processes that take
// messages from the same channel are no concern: the poller looks again
// after any event. docs/design.md ("The Go binding") says why.
//
// # Close and Release
//
// There are two different ends, as with a Go channel and the variable that
// holds it:
//
//   - Close closes the channel itself, for every handle and every process
//     thread (D6): sends fail with ErrClosed, what is queued stays
//     receivable, and receives return ErrClosed once it is drained. Every
//     waiting goroutine wakes. Close is what a producer calls when done.
//   - Release frees this handle (the C eventq_chan_free). The channel lives
//     on while other handles (Clone, C code, a loop's channel source) hold
//     it; the last release discards what is still queued and counts it in
//     FinalStats. After Release, calls on this Chan return ErrReleased, and
//     goroutines still waiting on it wake with ErrReleased. A finalizer
//     releases a forgotten handle, but only as a backstop: call Release.
//
// # Cost
//
// A channel holds its receive eventfd for as long as any handle lives, and
// its send eventfd from the first use of it (SendFd, SendFile, or a Send
// that has to wait for room) on: one fd for a channel only received from
// or never full. Its slots (64 bytes each, 64 KiB at the default capacity
// of 1024; WithCapacity sets it) are allocated zeroed when it is created,
// and at 8 KiB or more become resident only as messages reach them: an
// idle channel costs about 1 KiB. The first message longer than 48 bytes
// allocates a buffer per slot (24 bytes each), and a slot that has carried
// such a message keeps its buffer for reuse (up to 64 KiB). A handle on
// which goroutines have waited holds one more fd per side, a dup of the
// receive or send eventfd that they wait on, until Release; the poller
// goroutine runs only while two or more wait. A process-shared channel
// (NewSharedChan) differs: its slots are a memfd of about capacity times
// the message limit, and its receive and send fds are epoll fds made with
// it.
type Chan struct {
	ptr    *C.eventq_chan
	handle C.uintptr_t // ptr as an integer, for the eq_* wrappers
	recvFd int
	sendFd atomic.Int32 // -1 until first asked for (sendFdOnce)
	ref    splitRef     // counters on their own cache lines

	// waits are the queues of waiting goroutines per direction (dirRecv,
	// dirSend), made by the first wait; objects of their own, so that a
	// poller goroutine does not keep the Chan reachable (its finalizer is
	// the backstop of Release).
	waits [2]atomic.Pointer[waitq]

	mu        sync.Mutex
	released  bool
	selectors map[weak.Pointer[Selector]]struct{} // the selectors this handle is a member of
	final     atomic.Pointer[Stats]
}

// Stats are a channel's counters (the C eventq_chan_stats).
type Stats struct {
	Sent         uint64 // messages accepted by sends
	Received     uint64 // messages returned by receives
	Pending      uint64 // messages queued now
	PendingBytes uint64 // bytes queued now
	Dropped      uint64 // messages discarded when the last handle was freed
	PeakDepth    uint64 // most messages ever queued at once
	// Writes to the receive eventfd: one per empty-to-non-empty transition
	// and one at close; far below Sent on a busy channel.
	RecvDoorbellRings uint64
	// Writes to the send eventfd: at creation, per drain to the low-water
	// mark after the channel was full, and at close.
	SendDoorbellRings uint64
	Closed            bool
}

func statsOf(s *C.eventq_chan_stats) Stats {
	return Stats{
		Sent:              uint64(s.sent),
		Received:          uint64(s.received),
		Pending:           uint64(s.pending),
		PendingBytes:      uint64(s.pending_bytes),
		Dropped:           uint64(s.dropped),
		PeakDepth:         uint64(s.peak_depth),
		RecvDoorbellRings: uint64(s.recv_doorbell_rings),
		SendDoorbellRings: uint64(s.send_doorbell_rings),
		Closed:            s.closed != 0,
	}
}

type options struct {
	capacity, maxBytes, maxMsg, lowWater int
	lowWaterSet                          bool
}

// Option configures NewChan and NewSharedChan.
type Option func(*options)

// WithCapacity sets the most messages queued at once (default 1024; at
// least 1). The slots are allocated at creation, 64 bytes each, and
// become resident as messages reach them (see Chan).
func WithCapacity(n int) Option { return func(o *options) { o.capacity = n } }

// WithMaxBytes sets the most bytes queued at once, the sum of the queued
// messages' lengths (default 0: no byte limit).
func WithMaxBytes(n int) Option { return func(o *options) { o.maxBytes = n } }

// WithMaxMessageSize sets the longest message accepted (default 1 MiB, or
// the byte limit if smaller; 4096 for NewSharedChan); longer sends fail
// with ErrTooLarge.
func WithMaxMessageSize(n int) Option { return func(o *options) { o.maxMsg = n } }

// WithLowWater sets the queue depth at or below which the send side is
// signalled again after the channel was full (default half the capacity;
// must be below the capacity). Blocked senders wake at this depth.
func WithLowWater(n int) Option {
	return func(o *options) { o.lowWater, o.lowWaterSet = n, true }
}

// NewChan creates a channel and returns its first handle. Invalid options
// (zero capacity, a maximum message size above the byte limit, low water
// not below capacity, negative values) give an error wrapping
// syscall.EINVAL.
func NewChan(opts ...Option) (*Chan, error) {
	copts, err := cOptions(opts)
	if err != nil {
		return nil, err
	}
	var p *C.eventq_chan
	if rc, text := cCall(func() C.int { return C.eventq_chan_new(&copts, &p) }); rc < 0 {
		return nil, withText(chanErr(rc), text)
	}
	return wrapChan(p), nil
}

// cOptions applies opts to the defaults and returns them for the C calls.
func cOptions(opts []Option) (C.eventq_chan_opts, error) {
	var copts C.eventq_chan_opts
	o := options{capacity: C.EVENTQ_DEFAULT_CAPACITY}
	for _, opt := range opts {
		opt(&o)
	}
	if o.capacity < 0 || o.maxBytes < 0 || o.maxMsg < 0 || o.lowWater < 0 {
		return copts, syscall.EINVAL
	}
	if rc := C.eventq_chan_opts_init(&copts, C.sizeof_struct_eventq_chan_opts); rc < 0 {
		return copts, chanErr(rc)
	}
	copts.capacity = C.size_t(o.capacity)
	copts.max_bytes = C.size_t(o.maxBytes)
	copts.max_msg_size = C.size_t(o.maxMsg)
	if o.lowWaterSet {
		copts.low_water = C.size_t(o.lowWater)
	}
	return copts, nil
}

// FromC takes ownership of a C channel handle (an eventq_chan*, for example
// made by C code with eventq_chan_new or eventq_chan_clone) and returns it
// as a Chan. The Chan frees it on Release; C code must not free it.
func FromC(handle unsafe.Pointer) (*Chan, error) {
	if handle == nil {
		return nil, syscall.EINVAL
	}
	return wrapChan((*C.eventq_chan)(handle)), nil
}

func wrapChan(p *C.eventq_chan) *Chan {
	c := &Chan{
		ptr:    p,
		handle: C.uintptr_t(uintptr(unsafe.Pointer(p))),
		recvFd: int(C.eventq_chan_recv_fd(p)),
	}
	c.sendFd.Store(-1)
	c.ref.init()
	liveChans.Add(1)
	runtime.SetFinalizer(c, (*Chan).finalize)
	return c
}

// use takes a reference to the handle for one call from shard s (refSend
// for the sending calls, refOther for the rest); done gives it back.
func (c *Chan) use(s int) bool { return c.ref.acquire(s) }

func (c *Chan) done(s int) {
	if c.ref.release(s) {
		c.free()
	}
	runtime.KeepAlive(c)
}

func (c *Chan) free() {
	var st C.eventq_chan_stats
	if C.eventq_chan_free_final(c.ptr, &st, C.sizeof_struct_eventq_chan_stats) == 1 {
		s := statsOf(&st)
		c.final.Store(&s)
	}
	liveChans.Add(-1)
}

// Clone returns a new handle to the same channel, released separately.
func (c *Chan) Clone() (*Chan, error) {
	p, err := c.clonePtr()
	if err != nil {
		return nil, err
	}
	return wrapChan(p), nil
}

// clonePtr returns a new C handle to the channel.
func (c *Chan) clonePtr() (*C.eventq_chan, error) {
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	defer c.done(refOther)
	p := C.eventq_chan_clone(c.ptr)
	if p == nil {
		return nil, syscall.ENOMEM
	}
	return p, nil
}

// CloneC returns a new C handle (an eventq_chan*) to the same channel, for
// C code in the same process; that code frees it with eventq_chan_free.
// Nil if this handle was released.
func (c *Chan) CloneC() unsafe.Pointer {
	if !c.use(refOther) {
		return nil
	}
	defer c.done(refOther)
	return unsafe.Pointer(C.eventq_chan_clone(c.ptr))
}

// Close closes the channel for every handle (D6). Sends fail with ErrClosed
// from now on; queued messages stay receivable and receives return
// ErrClosed once the channel is drained; every goroutine (and C thread)
// waiting on the channel wakes. Close loses nothing already accepted and
// may be called any number of times, from any goroutine. It does not
// release this handle (see Release).
func (c *Chan) Close() error {
	if !c.use(refOther) {
		return ErrReleased
	}
	defer c.done(refOther)
	return chanErr(C.eventq_chan_close(c.ptr))
}

// Release frees this handle (not the channel, unless it is the last
// handle: see the type's documentation). Goroutines still waiting on this
// handle wake with ErrReleased; calls in progress finish first. A second
// Release returns ErrReleased.
func (c *Chan) Release() error {
	if !c.ref.close() {
		return ErrReleased
	}
	runtime.SetFinalizer(c, nil)
	c.shutdown()
	return nil
}

func (c *Chan) finalize() {
	if c.ref.close() {
		c.shutdown()
	}
}

// shutdown wakes the goroutines waiting on this handle (and the selectors
// it is a member of) and drops the owner's reference.
func (c *Chan) shutdown() {
	c.mu.Lock()
	c.released = true
	sels := c.selectors
	c.selectors = nil
	c.mu.Unlock()
	for d := range c.waits {
		// A queue made from now on finds c.released (waitq).
		if q := c.waits[d].Load(); q != nil {
			q.release(ErrReleased)
		}
	}
	for p := range sels {
		if s := p.Value(); s != nil {
			s.memberReleased(c)
		}
	}
	if c.ref.releaseOwner() {
		c.free()
	}
	runtime.KeepAlive(c)
}

// FinalStats returns the channel's last counters, including Dropped (the
// messages discarded because they were still queued), if the Release of
// this handle freed the channel's last handle; ok is false otherwise.
func (c *Chan) FinalStats() (s Stats, ok bool) {
	if p := c.final.Load(); p != nil {
		return *p, true
	}
	return Stats{}, false
}

// Stats returns a snapshot of the channel's counters.
func (c *Chan) Stats() (Stats, error) {
	if !c.use(refOther) {
		return Stats{}, ErrReleased
	}
	defer c.done(refOther)
	var st C.eventq_chan_stats
	if rc := C.eventq_chan_get_stats(c.ptr, &st, C.sizeof_struct_eventq_chan_stats); rc < 0 {
		return Stats{}, chanErr(rc)
	}
	return statsOf(&st), nil
}

// RecvFd returns the channel's receive fd, for users who poll it in their
// own event loop: readable exactly while messages are pending or the
// channel is closed (D4). The fd belongs to the channel: poll it, never
// read, write or close it, and never pass it to os.NewFile (the os.File
// would close it; use RecvFile for an *os.File). It is -1 once this handle
// is released: the number may already be closed or reused by then. Use it
// only while this handle is not released (RecvFile's dup has no such
// limit). Of a process-shared channel (NewSharedChan) it is an epoll fd,
// readable also once the other process is gone; the kernel refuses
// EPOLLEXCLUSIVE on it.
func (c *Chan) RecvFd() int {
	if c.ref.closed() {
		return -1
	}
	return c.recvFd
}

// SendFd returns the channel's send fd: not readable while the channel is
// full and open, readable again once it drained to the low-water mark or
// is closed (D5). Ownership, and -1 once this handle is released, as for
// RecvFd. The first use of the send fd creates it (a channel never asked
// for it has one fd); -1 too if that fails (no fd left: SendFile says
// why).
func (c *Chan) SendFd() int {
	if c.ref.closed() {
		return -1
	}
	fd, err := c.sendFdOnce()
	if err != nil {
		return -1
	}
	return fd
}

// sendFdOnce returns the send fd, which the library creates on the
// channel's first request for it.
func (c *Chan) sendFdOnce() (int, error) {
	if fd := c.sendFd.Load(); fd >= 0 {
		return int(fd), nil
	}
	if !c.use(refOther) {
		return -1, ErrReleased
	}
	defer c.done(refOther)
	rc := C.eventq_chan_send_fd(c.ptr)
	if rc < 0 {
		return -1, chanErr(rc)
	}
	c.sendFd.Store(int32(rc))
	return int(rc), nil
}

// RecvFile returns a duplicate of the receive fd (close-on-exec, shares
// its readiness) as an *os.File registered with Go's netpoller; the caller
// owns and closes it. Wait on it with SyscallConn().Read, trying TryRecv
// inside and returning false only on ErrWouldBlock; never call its Fd
// method, which would make it blocking.
func (c *Chan) RecvFile() (*os.File, error) { return c.dupFile(c.recvFd, "eventq-recv") }

// SendFile is RecvFile for the send fd (wait with TrySend inside).
func (c *Chan) SendFile() (*os.File, error) {
	fd, err := c.sendFdOnce()
	if err != nil {
		return nil, err
	}
	return c.dupFile(fd, "eventq-send")
}

func (c *Chan) dupFile(fd int, name string) (*os.File, error) {
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	defer c.done(refOther)
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", e)
	}
	// The eventfd is O_NONBLOCK (shared by the dup), so os.NewFile puts it
	// in the netpoller; a zero deadline fails if that did not happen.
	f := os.NewFile(r, name)
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// --- Sending ---------------------------------------------------------------

// bytesPtr is the address of b's first byte for C (nil or not for an empty
// slice: the library accepts either with a length of 0).
func bytesPtr(b []byte) *C.uint8_t { return (*C.uint8_t)(unsafe.SliceData(b)) }

// Go's int and C's size_t have the same size on every platform cgo
// supports; lensPtr relies on it to pass a []int as a size_t array.
var _ [unsafe.Sizeof(C.size_t(0)) - unsafe.Sizeof(int(0))]struct{}
var _ [unsafe.Sizeof(int(0)) - unsafe.Sizeof(C.size_t(0))]struct{}

func lensPtr(lens []int) *C.size_t { return (*C.size_t)(unsafe.Pointer(unsafe.SliceData(lens))) }

func (c *Chan) trySend(msg []byte) C.int {
	return C.eq_send(c.handle, bytesPtr(msg), C.size_t(len(msg)))
}

// TrySend queues a copy of msg if there is room now. Errors: ErrWouldBlock
// (full), ErrClosed, ErrTooLarge, ErrReleased. On error nothing was queued
// and msg stays the caller's.
func (c *Chan) TrySend(msg []byte) error {
	if !c.use(refSend) {
		return ErrReleased
	}
	rc := c.trySend(msg)
	c.done(refSend)
	return chanErr(rc)
}

// Send queues a copy of msg, waiting in the netpoller while the channel is
// full, until there is room, the channel is closed (ErrClosed), or ctx is
// done (ctx.Err()). On any error nothing was queued. A done ctx does not
// stop a send that finds room at once.
//
// A Send that found the channel full waits on the send fd, which the
// library raises when the queue has drained to its low-water mark (D5;
// default half the capacity, see WithLowWater), not at the first free
// slot: like a socket's SO_SNDLOWAT, this wakes a blocked producer once per
// drained half instead of once per message. WithLowWater(capacity-1) wakes
// it as soon as one message is taken.
//
// Cost: one cgo call when there is room (no allocation, no syscall unless
// the queue was empty, which rings the receive fd).
func (c *Chan) Send(ctx context.Context, msg []byte) error {
	if !c.use(refSend) {
		return ErrReleased
	}
	rc := c.trySend(msg)
	if rc == eagain {
		return c.sendWait(ctx, msg)
	}
	c.done(refSend)
	return chanErr(rc)
}

// sendWait is Send's slow path, apart so that the fast path allocates no
// closure. It gives back the caller's reference.
func (c *Chan) sendWait(ctx context.Context, msg []byte) error {
	defer c.done(refSend)
	rc, err := c.wait(ctx, dirSend, func() C.int { return c.trySend(msg) }, true)
	if err != nil {
		return err
	}
	return chanErr(rc)
}

// packed is SendBatch's scratch: the messages copied back to back and
// their lengths.
type packed struct {
	buf  []byte
	lens []int
}

var packedPool = sync.Pool{New: func() any { return new(packed) }}

// maxPooled is the largest scratch buffer kept for reuse.
const maxPooled = 1 << 20

func putPacked(pk *packed) {
	if cap(pk.buf) <= maxPooled {
		packedPool.Put(pk)
	}
}

// SendBatch sends msgs in order, waiting for room as Send does, until all
// are queued, the channel is closed, ctx is done, or a message is too
// large; it returns how many were queued (a prefix of msgs) and the error
// that stopped it.
//
// Cost: the messages are copied back to back into a pooled buffer (Go
// memory passed to C may not hold Go pointers, so the C library cannot be
// handed msgs itself) and queued with one cgo call for the whole batch
// when the channel has room; no allocation in the steady state. Callers
// that already hold their messages packed can use SendPacked and skip that
// copy.
func (c *Chan) SendBatch(ctx context.Context, msgs [][]byte) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	if !c.use(refSend) {
		return 0, ErrReleased
	}
	defer c.done(refSend)
	pk := packedPool.Get().(*packed)
	defer putPacked(pk)
	total := 0
	for _, m := range msgs {
		total += len(m)
	}
	if cap(pk.buf) < total {
		pk.buf = make([]byte, total)
	}
	if cap(pk.lens) < len(msgs) {
		pk.lens = make([]int, len(msgs))
	}
	buf, lens := pk.buf[:total], pk.lens[:len(msgs)]
	off := 0
	for i, m := range msgs {
		off += copy(buf[off:], m)
		lens[i] = len(m)
	}
	return c.sendPacked(ctx, buf, lens)
}

// SendPacked sends len(lens) messages stored back to back in buf (message
// i is lens[i] bytes, following message i-1), in order, waiting for room as
// Send does; it returns how many were queued (a prefix) and the error that
// stopped it, as SendBatch does. It is SendBatch without the copy into a
// packed buffer: one cgo call per batch when the channel has room and no
// allocation; buf and lens stay the caller's. RecvBatchInto produces this
// layout, so a received batch can be forwarded as it is.
//
// A negative length, or lengths adding up to more than len(buf), fail with
// an error wrapping syscall.EINVAL before anything is sent.
func (c *Chan) SendPacked(ctx context.Context, buf []byte, lens []int) (int, error) {
	total := 0
	for _, l := range lens {
		if l < 0 || l > len(buf)-total {
			return 0, syscall.EINVAL
		}
		total += l
	}
	if len(lens) == 0 {
		return 0, nil
	}
	if !c.use(refSend) {
		return 0, ErrReleased
	}
	defer c.done(refSend)
	return c.sendPacked(ctx, buf[:total], lens)
}

// maxPackedCall bounds the messages of one eq_send_packed call, whose
// count is returned as a C int.
const maxPackedCall = 1 << 24

// sendPacked is SendBatch and SendPacked once the lengths are checked and
// the caller holds a reference.
func (c *Chan) sendPacked(ctx context.Context, buf []byte, lens []int) (int, error) {
	sent, off := 0, 0
	for sent < len(lens) {
		rc := c.trySendPacked(buf[off:], lens[sent:])
		if rc == eagain {
			var err error
			if rc, err = c.sendPackedWait(ctx, buf[off:], lens[sent:]); err != nil {
				return sent, err
			}
		}
		if rc < 0 {
			return sent, chanErr(rc)
		}
		for _, l := range lens[sent : sent+int(rc)] {
			off += l
		}
		sent += int(rc)
	}
	return sent, nil
}

func (c *Chan) trySendPacked(buf []byte, lens []int) C.int {
	n := min(len(lens), maxPackedCall)
	return C.eq_send_packed(c.handle, bytesPtr(buf), lensPtr(lens), C.size_t(n))
}

// sendPackedWait is apart so that the fast path allocates no closure.
func (c *Chan) sendPackedWait(ctx context.Context, buf []byte, lens []int) (C.int, error) {
	return c.wait(ctx, dirSend, func() C.int { return c.trySendPacked(buf, lens) }, true)
}

// --- Receiving -------------------------------------------------------------

// recvStack is the size of the stack buffer a Recv first receives into
// (zeroed on each call, so not larger than most messages need).
const recvStack = 256

// tryRecv takes the head message into a new slice of its exact length.
func (c *Chan) tryRecv() ([]byte, C.int) {
	var stack [recvStack]byte
	var n C.size_t
	rc := C.eq_recv(c.handle, (*C.uint8_t)(&stack[0]), recvStack, &n)
	if rc == 0 {
		// make+copy of the same length: the compiler skips zeroing msg.
		src := stack[:n]
		msg := make([]byte, len(src))
		copy(msg, src)
		return msg, 0
	}
	for rc == emsgsize {
		// Longer than the stack buffer: receive straight into one of its
		// size. Another consumer may take it first; then try again with
		// whatever is at the head now.
		buf := make([]byte, int(n))
		rc = C.eq_recv(c.handle, bytesPtr(buf), n, &n)
		if rc == 0 {
			return buf[:n:n], 0
		}
	}
	return nil, rc
}

// TryRecv returns the head message if there is one now (a new slice;
// zero-length messages are non-nil empty slices). Errors: ErrWouldBlock
// (empty), ErrClosed (closed and drained: end of stream), ErrReleased.
func (c *Chan) TryRecv() ([]byte, error) {
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	msg, rc := c.tryRecv()
	c.done(refOther)
	return msg, chanErr(rc)
}

// Recv returns the next message (a new slice of exactly its length),
// waiting while the channel is empty. It returns ErrClosed at end of
// stream (closed and drained) and ctx.Err() if ctx is done first; a done
// ctx does not stop a Recv that finds a message at once.
//
// Any number of goroutines may Recv on one handle, as the workers of a
// pool do: those that find the channel empty wait in one queue, in the
// order they came, and each message wakes the one goroutine it goes to,
// not all of them (see "Waiting" in the type's documentation). A worker
// that stops (its ctx done) loses nothing and leaves nothing behind.
//
// Cost: one cgo call and one allocation (the returned slice) per message
// when one is queued (two cgo calls for messages over 256 bytes, the
// second straight into the new slice). RecvInto and RecvBatchInto
// allocate nothing. A Recv that waits alone costs two more receive
// attempts (refused) and a wake-up from the netpoller; one that waits
// behind others, none (it queues while the poller has found the channel
// empty) and two goroutine switches, the poller's wake-up and its
// hand-over.
func (c *Chan) Recv(ctx context.Context) ([]byte, error) {
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	if c.skip() {
		return c.recvWait(ctx, false)
	}
	msg, rc := c.tryRecv()
	if rc == eagain {
		return c.recvWait(ctx, true)
	}
	c.done(refOther)
	return msg, chanErr(rc)
}

// recvWait is Recv's slow path, apart so that the fast path allocates no
// closure. It gives back the caller's reference.
func (c *Chan) recvWait(ctx context.Context, tried bool) ([]byte, error) {
	defer c.done(refOther)
	var msg []byte
	rc, err := c.wait(ctx, dirRecv, func() C.int {
		var r C.int
		msg, r = c.tryRecv()
		return r
	}, tried)
	if err != nil {
		return nil, err
	}
	return msg, chanErr(rc)
}

func (c *Chan) tryRecvInto(buf []byte, n *C.size_t) C.int {
	return C.eq_recv(c.handle, bytesPtr(buf), C.size_t(len(buf)), n)
}

// RecvInto receives the next message into buf and returns its length,
// waiting as Recv does. If buf is shorter than the message it returns a
// *BufferTooSmallError with the length needed, and the message stays at
// the head of the queue (D7). One cgo call, no allocation.
func (c *Chan) RecvInto(ctx context.Context, buf []byte) (int, error) {
	if !c.use(refOther) {
		return 0, ErrReleased
	}
	if c.skip() {
		return c.recvIntoWait(ctx, buf, false)
	}
	var n C.size_t
	rc := c.tryRecvInto(buf, &n)
	if rc == eagain {
		return c.recvIntoWait(ctx, buf, true)
	}
	c.done(refOther)
	return recvIntoResult(rc, n)
}

// recvIntoWait gives back the caller's reference.
func (c *Chan) recvIntoWait(ctx context.Context, buf []byte, tried bool) (int, error) {
	defer c.done(refOther)
	var n C.size_t
	rc, err := c.wait(ctx, dirRecv, func() C.int { return c.tryRecvInto(buf, &n) }, tried)
	if err != nil {
		return 0, err
	}
	return recvIntoResult(rc, n)
}

func recvIntoResult(rc C.int, n C.size_t) (int, error) {
	if rc == emsgsize {
		return 0, &BufferTooSmallError{Needed: int(n)}
	}
	if rc < 0 {
		return 0, chanErr(rc)
	}
	return int(n), nil
}

// DefaultBatch is the batch size RecvBatch uses when asked for max <= 0,
// and the one All and Batches use.
const DefaultBatch = 64

// batchScratch is RecvBatch's packed buffer and lengths, pooled.
type batchScratch struct {
	buf  []byte
	lens []int
}

var batchPool = sync.Pool{New: func() any {
	return &batchScratch{buf: make([]byte, 64<<10)}
}}

// tryRecvBatchInto takes up to len(lens) messages packed into buf with
// one cgo call; on -EMSGSIZE lens[0] holds the head's length.
func (c *Chan) tryRecvBatchInto(buf []byte, lens []int) C.int {
	return C.eq_recv_batch(c.handle, bytesPtr(buf), C.size_t(len(buf)), lensPtr(lens), C.size_t(len(lens)))
}

// tryRecvBatch takes up to max messages with one cgo call and returns
// them in new memory.
func (c *Chan) tryRecvBatch(s *batchScratch, max int) ([][]byte, C.int) {
	if cap(s.lens) < max {
		s.lens = make([]int, max)
	}
	lens := s.lens[:max]
	for {
		rc := c.tryRecvBatchInto(s.buf, lens)
		if rc == emsgsize {
			s.buf = make([]byte, lens[0])
			continue
		}
		if rc <= 0 {
			return nil, rc
		}
		total := 0
		for _, l := range lens[:rc] {
			total += l
		}
		// One allocation for the whole batch (make+copy of the same
		// length: not zeroed first); each message is a full slice
		// expression, so appending to one cannot overwrite the next.
		src := s.buf[:total]
		all := make([]byte, len(src))
		copy(all, src)
		msgs := make([][]byte, rc)
		off := 0
		for i, l := range lens[:rc] {
			msgs[i] = all[off : off+l : off+l]
			off += l
		}
		return msgs, rc
	}
}

// RecvBatch waits (as Recv does) for at least one message, then returns
// up to max messages that are queued (max <= 0: DefaultBatch), in order.
// With a done ctx it returns what is queued now, or ctx.Err().
//
// Cost: one cgo call per batch, into a pooled packed buffer, then one copy
// into a single new allocation that the returned slices share, plus the
// new [][]byte: two allocations per batch, whatever its size. RecvBatchInto
// receives into the caller's buffers and allocates nothing.
func (c *Chan) RecvBatch(ctx context.Context, max int) ([][]byte, error) {
	if max <= 0 {
		max = DefaultBatch
	}
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	defer c.done(refOther)
	s := batchPool.Get().(*batchScratch)
	defer func() {
		if len(s.buf) <= maxPooled {
			batchPool.Put(s)
		}
	}()
	if c.skip() {
		return c.recvBatchWait(ctx, s, max, false)
	}
	msgs, rc := c.tryRecvBatch(s, max)
	if rc == eagain {
		return c.recvBatchWait(ctx, s, max, true)
	}
	if rc < 0 {
		return nil, chanErr(rc)
	}
	return msgs, nil
}

func (c *Chan) recvBatchWait(ctx context.Context, s *batchScratch, max int, tried bool) ([][]byte, error) {
	var msgs [][]byte
	rc, err := c.wait(ctx, dirRecv, func() C.int {
		var r C.int
		msgs, r = c.tryRecvBatch(s, max)
		return r
	}, tried)
	if err != nil {
		return nil, err
	}
	if rc < 0 {
		return nil, chanErr(rc)
	}
	return msgs, nil
}

// RecvBatchInto waits (as Recv does) for at least one message, then
// receives up to len(lens) queued messages, in order, packed back to back
// into buf: message i is lens[i] bytes long and starts where message i-1
// ends (the first at buf[0]). It returns the number received, n; lens[n:]
// is left as it was. It stops before a message that does not fit in what
// is left of buf.
//
// If buf cannot hold even the head message, nothing is taken (D7) and the
// error is a *BufferTooSmallError with the length needed (lens[0] is then
// overwritten with it too). An empty lens fails with an error wrapping
// syscall.EINVAL. Other errors as for Recv. With a done ctx it returns
// what is queued now, or ctx.Err().
//
// Cost: one cgo call per batch, straight into buf; no allocation. The
// messages are valid until buf is reused; SendPacked sends this layout.
func (c *Chan) RecvBatchInto(ctx context.Context, buf []byte, lens []int) (int, error) {
	if len(lens) == 0 {
		return 0, syscall.EINVAL
	}
	if !c.use(refOther) {
		return 0, ErrReleased
	}
	if c.skip() {
		return c.recvBatchIntoWait(ctx, buf, lens, false)
	}
	rc := c.tryRecvBatchInto(buf, lens)
	if rc == eagain {
		return c.recvBatchIntoWait(ctx, buf, lens, true)
	}
	c.done(refOther)
	return recvBatchIntoResult(rc, lens)
}

// recvBatchIntoWait gives back the caller's reference.
func (c *Chan) recvBatchIntoWait(ctx context.Context, buf []byte, lens []int, tried bool) (int, error) {
	defer c.done(refOther)
	rc, err := c.wait(ctx, dirRecv, func() C.int { return c.tryRecvBatchInto(buf, lens) }, tried)
	if err != nil {
		return 0, err
	}
	return recvBatchIntoResult(rc, lens)
}

func recvBatchIntoResult(rc C.int, lens []int) (int, error) {
	if rc == emsgsize {
		return 0, &BufferTooSmallError{Needed: lens[0]}
	}
	if rc < 0 {
		return 0, chanErr(rc)
	}
	return int(rc), nil
}

// --- Waiting ---------------------------------------------------------------

type direction int

const (
	dirRecv direction = iota
	dirSend
)

// parkHook, if set (by the tests), runs each time a goroutine is about to
// wait in Send or Recv: to park in the netpoller, or to block in the queue
// (see waitq).
var parkHook atomic.Pointer[func(*Chan, direction)]

// skip reports whether a receive should queue without an attempt of its
// own (see waitq).
func (c *Chan) skip() bool {
	q := c.waits[dirRecv].Load()
	return q != nil && q.hint.Load()&hintSkip != 0
}

// waitq returns the queue of direction d, made on first use. One made
// after Release is released at once.
func (c *Chan) waitq(d direction) *waitq {
	if q := c.waits[d].Load(); q != nil {
		return q
	}
	q := newWaitq(d == dirRecv, d == dirRecv)
	if !c.waits[d].CompareAndSwap(nil, q) {
		return c.waits[d].Load()
	}
	c.mu.Lock()
	released := c.released
	c.mu.Unlock()
	if released {
		q.release(ErrReleased)
	}
	return q
}

// wait makes op, a non-blocking attempt, until it returns something other
// than -EAGAIN, and returns that, waiting in the side's queue in between
// (waitq.wait; tried as there). The library owes every attempt
// refused with -EAGAIN an event on the fd no later than when an attempt
// would succeed (a message to receive; the send fd's low-water rule) or the
// channel closes (D9), so a queue whose poller looked is never forgotten.
// ctx ends the wait with ctx.Err(); op's outcome is never dropped.
func (c *Chan) wait(ctx context.Context, d direction, op func() C.int, tried bool) (C.int, error) {
	var hook func()
	if ph := parkHook.Load(); ph != nil {
		hook = func() { (*ph)(c, d) }
	}
	return c.waitq(d).wait(ctx, op, tried, func() (*os.File, error) { return c.waitFile(d) }, hook)
}

// waitFile makes the file a side's poller waits on: a dup of its fd.
func (c *Chan) waitFile(d direction) (*os.File, error) {
	if d == dirRecv {
		return c.dupFile(c.recvFd, "eventq-recv")
	}
	fd, err := c.sendFdOnce()
	if err != nil {
		return nil, err
	}
	return c.dupFile(fd, "eventq-send")
}
