// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

/*
#include <stdint.h>
#include <stdlib.h>
#include <eventq.h>

// A ChanFunc source's buffer for eq_pull, in C memory.
typedef struct { void *buf; size_t cap; size_t len; } eq_scratch;

// The Go trampolines of callbacks.go (declared by cgo in _cgo_export.h).
// They only collect what the library reports: the callbacks the user gave
// run later, in Go, once the library's call has returned (exec.go).
extern int eqGoFd(eventq_source *src, int fd, uint32_t revents, uintptr_t h);
extern int eqGoTimer(eventq_source *src, uint64_t expirations, uintptr_t h);
extern int eqGoChanBatch(eventq_source *src, void *data, size_t *lens, size_t count, uintptr_t h);
extern void eqGoDestroy(uintptr_t h);

// The C callbacks the library calls. userdata carries a cgo.Handle, an
// integer: Go only ever passes it as uintptr_t, and only C code casts it to
// and from the ABI's void *.
static int eq_fd_cb(eventq_source *s, int fd, uint32_t ev, void *ud) {
	return eqGoFd(s, fd, ev, (uintptr_t)ud);
}
static int eq_timer_cb(eventq_source *s, uint64_t n, void *ud) {
	return eqGoTimer(s, n, (uintptr_t)ud);
}
static int eq_chan_batch_cb(eventq_source *s, const void *data, const size_t *lens,
                            size_t count, void *ud) {
	return eqGoChanBatch(s, (void *)data, (size_t *)lens, count, (uintptr_t)ud);
}
static void eq_destroy_cb(void *ud) { eqGoDestroy((uintptr_t)ud); }
// The wake-up of a loop waiting in epoll for a Go post: a post of the
// library that does nothing (its queue raises the loop's wake fd).
static void eq_wake_cb(void *arg) { (void)arg; }

static int eq_add_fd(const eventq_loop *lp, int fd, uint32_t events, uintptr_t h,
                     eventq_source **out) {
	return eventq_loop_add_fd(lp, fd, events, eq_fd_cb, (void *)h, eq_destroy_cb, out);
}
static int eq_add_timer(const eventq_loop *lp, uint64_t first, uint64_t interval,
                        uintptr_t h, eventq_source **out) {
	return eventq_loop_add_timer(lp, first, interval, eq_timer_cb, (void *)h, eq_destroy_cb, out);
}
static int eq_add_chan(const eventq_loop *lp, const eventq_chan *ch, size_t budget,
                       uintptr_t h, eventq_source **out) {
	return eventq_loop_add_chan_batch(lp, ch, budget, eq_chan_batch_cb, (void *)h,
	                                  eq_destroy_cb, out);
}
// The next message of a channel source's channel, into buf; -EAGAIN when
// none, -EMSGSIZE (with *len the size it needs) when buf is too short.
static int eq_pull(const eventq_chan *ch, void *buf, size_t cap, size_t *len) {
	return eventq_chan_recv(ch, buf, cap, len, 0);
}
static int eq_wake(const eventq_loop *lp) {
	return eventq_loop_post(lp, eq_wake_cb, NULL, NULL);
}
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Events are fd readiness flags (the epoll values), for AddFd and
// Source.SetEvents, and reported to FdFunc.
type Events uint32

const (
	In  Events = C.EVENTQ_IN
	Pri Events = C.EVENTQ_PRI
	Out Events = C.EVENTQ_OUT
	// Fault reports an error condition on the fd (EPOLLERR); always reported,
	// whether asked for or not.
	Fault Events = C.EVENTQ_ERR
	Hup   Events = C.EVENTQ_HUP // always reported, whether asked for or not
	RdHup Events = C.EVENTQ_RDHUP
	// Edge makes the source edge-triggered: each change is reported once.
	Edge Events = C.EVENTQ_EDGE
	// OneShot disables the source after one event; SetEnabled(true)
	// re-arms it.
	OneShot Events = C.EVENTQ_ONESHOT

	// Err is the old name of Fault.
	//
	// Deprecated: Go names error values Err…; use Fault.
	Err = Fault
)

// FdFunc is called on the loop's goroutine when an fd source is ready, with
// the flags that are set. A non-nil error disables the source (see
// Source.Err); the loop goes on.
type FdFunc func(src *Source, fd int, revents Events) error

// TimerFunc is called when a timer expired, with the number of expirations
// since the last call (above 1: the loop was late; the period does not
// drift). Errors as for FdFunc.
type TimerFunc func(src *Source, expirations uint64) error

// ChanFunc is called once per message of a channel source, in order, with
// a copy of the message that the callback may keep. After the last message
// of a closed channel it is called once more with msg nil and eof true,
// and the source is then disabled. Errors as for FdFunc.
//
// A message is taken from the channel only to be delivered: a callback
// that stops the loop, fails, panics, calls runtime.Goexit, or removes or
// disables its source (or closes the loop) leaves every later message in
// the channel, for the next run or another consumer. So the source takes
// one message at a time: the first of an iteration comes with the
// library's report of the source, the next ones by one call into the
// library each (about 35 ns, the cheap direction: no callback from C).
// AddChanBatch delivers batches instead, one cgo crossing a batch.
type ChanFunc func(src *Source, msg []byte, eof bool) error

// ChanBatchFunc is called once per batch of a batch channel source
// (AddChanBatch): msgs are the batch's messages in order, at least one, in
// Go memory that the callback may keep (slices of one copy of the batch:
// keeping one keeps the batch's memory). After the last message of a
// closed channel it is called once more with msgs nil and eof true, and
// the source is then disabled. Every message of a batch is delivered by
// that one call, whatever the callback then does: a stop, failure, panic,
// Goexit, Remove or Close leaves the later messages in the channel.
// Errors as for FdFunc.
type ChanBatchFunc func(src *Source, msgs [][]byte, eof bool) error

// SignalFunc is called when a signal source's signal arrived. Errors as for
// FdFunc.
type SignalFunc func(src *Source, sig syscall.Signal) error

// liveHandles counts cgo.Handles made by this package and not yet deleted
// (for the tests: every one must be deleted exactly once).
var liveHandles atomic.Int64

const (
	modeIdle int32 = iota
	modeRun
	modeRunOnce
)

// DefaultCloseWait is how long Close waits for a callback running in
// another goroutine before it gives up with ErrWouldDeadlock (see
// Loop.Close and Loop.SetCloseWait).
const DefaultCloseWait = 5 * time.Second

// Loop is a libeventq event loop: an epoll dispatcher over fd, timer,
// channel and signal sources, with posts and Stop from any goroutine.
//
// Callbacks are Go functions run one at a time, in plain Go on the
// goroutine that called Run or RunOnce: the library's C call only collects
// what is ready (a channel's messages a batch per cgo crossing) and
// returns, then the binding runs the callbacks, with no C frame below
// them and no library lock held. They may add and remove sources (their
// own included), post, and stop or close the loop.
//
// A panic in a callback is recovered: its source is disabled, Run stops
// after the current callback, and Run (or RunOnce) returns a *PanicError.
// A callback's non-nil error only disables its source (Source.Err).
//
// # runtime.Goexit in a callback
//
// A callback that calls runtime.Goexit (t.FailNow, t.SkipNow, ...) ends
// the goroutine that called Run or RunOnce, as it would if the callback
// were an ordinary function call, which it is: the callback's deferred
// calls run, its source is disabled with Source.Err returning ErrGoexit,
// no other callback runs, and the goroutine exits, its deferred calls run,
// without Run or RunOnce returning. The loop is left idle and usable:
// another Run, Close and the rest work as before; what the run had not
// dispatched (the rest of a batch included) waits for the next.
//
// Run and RunOnce lock their goroutine to its OS thread for the run (by
// that thread the binding tells a callback's calls of Close, PostWait and
// Remove from another goroutine's). A callback may lock and unlock the
// thread as it likes, in pairs or not; only an UnlockOSThread beyond its
// own LockOSThread calls would undo the run's lock, after which its later
// calls of Close and PostWait could be taken for another goroutine's.
//
// Close frees the loop. A loop that is dropped without Close is freed by a
// cleanup once it is unreachable, also when its callbacks refer to it (as
// a callback calling lp.Stop does): the library holds no reference to the
// Loop, only to the loop's sources by number.
type Loop struct {
	c *loopCore
}

// loopRes is what the cleanup of a dropped Loop frees: nothing in it
// refers to the Loop or to callbacks.
type loopRes struct {
	ptr *C.eventq_loop
	ref refGuard
}

// loopCore is the loop's state; the Loop the user holds is a separate
// object so that its cleanup can run.
type loopCore struct {
	*loopRes
	sink *sink // where the trampolines put what the library reports

	mode   atomic.Int32
	runTid atomic.Int64 // the OS thread running the loop, 0 when idle

	// Stops: stopCount moves on every Stop, Close and (under Run) panic; a
	// run ends once it moved since the run began. stopPending is a Stop
	// for the next Run.
	stopCount   atomic.Uint64
	stopPending atomic.Bool
	// inC: the loop's goroutine is in (or entering) eventq_loop_run_once,
	// where a Post or Stop must wake it; woken: it was woken since.
	inC   atomic.Bool
	woken atomic.Bool

	closing   chan struct{} // closed by Close: PostWait stops waiting
	freedCh   chan struct{} // closed once the C loop is freed
	closeWait atomic.Int64  // Close's wait for a running callback, in ns

	mu      sync.Mutex
	freed   bool
	panics  []error
	sources map[uint64]*Source
	nextID  uint64
	running *Source // the source whose callback runs now
	runCond sync.Cond

	// The loop's goroutine only (and free, once no run can start).
	queue    []event   // collected, not yet run, in order
	qhead    int       // queue[:qhead] ran
	heldSrcs []*Source // sources with held messages

	// Posts, queued in Go. postSlots holds a token per pending post, taken
	// before queuing and given back when the post leaves the queue, so
	// PostWait waits for room on a Go channel.
	pmu         sync.Mutex
	posts       []func()
	phead       int
	postsClosed bool
	npost       atomic.Int64
	postSlots   chan struct{}

	dropPosts atomic.Uint64
	dropMsgs  atomic.Uint64
}

// NewLoop creates a loop.
func NewLoop() (*Loop, error) {
	var p *C.eventq_loop
	if rc, text := cCall(func() C.int { return C.eventq_loop_new(&p) }); rc < 0 {
		return nil, withText(errOf(rc), text)
	}
	c := &loopCore{
		loopRes:   &loopRes{ptr: p},
		sink:      &sink{ptr: p},
		postSlots: make(chan struct{}, C.EVENTQ_POST_CAPACITY),
		closing:   make(chan struct{}),
		freedCh:   make(chan struct{}),
		sources:   make(map[uint64]*Source),
	}
	c.runCond.L = &c.mu
	c.ref.init()
	c.closeWait.Store(int64(DefaultCloseWait))
	l := &Loop{c: c}
	runtime.AddCleanup(l, (*loopRes).drop, c.loopRes)
	return l, nil
}

// drop is the cleanup of a Loop dropped without Close: nothing runs it
// any more and nothing can, so it frees the C loop (the sources' destroy
// hooks delete their links) unless Close already did.
func (r *loopRes) drop() {
	if r.ref.close() && r.ref.release() {
		if h := loopFreedHook.Load(); h != nil {
			// Before the free, so the address names this loop alone.
			(*h)(uintptr(unsafe.Pointer(r.ptr)))
		}
		C.eventq_loop_free(r.ptr)
	}
}

// loopFreedHook, if set (by the tests), runs when the cleanup of a dropped
// loop is about to free it, given the C loop's address.
var loopFreedHook atomic.Pointer[func(uintptr)]

func (c *loopCore) use() bool { return c.ref.acquire() }

func (c *loopCore) done() {
	if c.ref.release() {
		c.free()
	}
}

// free frees the C loop (every source's destroy hook runs here, deleting
// its link), counts the messages taken and not delivered, and releases
// the source handles still held. Called by the last user of the loop once
// it is closed: no run is in progress.
func (c *loopCore) free() {
	C.eventq_loop_free(c.ptr)
	c.mu.Lock()
	sources := c.sources
	c.sources = nil
	c.freed = true
	c.runCond.Broadcast()
	c.mu.Unlock()
	var lost uint64
	for i := c.qhead; i < len(c.queue); i++ {
		lost += uint64(c.queue[i].rest())
	}
	c.queue, c.qhead = nil, 0
	for _, s := range c.heldSrcs {
		lost += uint64(s.dropHeld())
	}
	c.heldSrcs = nil
	c.dropMsgs.Add(lost)
	for _, s := range sources {
		if s.ref.close() {
			s.done()
		}
	}
	close(c.freedCh)
}

// closeWaitHook, if set (by the tests), runs when Close starts waiting for
// a run in another goroutine.
var closeWaitHook atomic.Pointer[func()]

// Close stops the loop and frees it: every source goes away, and Source
// methods return ErrRemoved. Posts not yet run never run: they are counted
// by Dropped, as are the messages of a batch that Close cut short (see
// ChanFunc). A second Close returns ErrLoopClosed.
//
// Once Close returns nil, no callback runs, as once Source.Remove returns:
//   - called from a callback, it stops the loop, which runs no other
//     callback (not the rest of a batch, nor other ready sources, nor
//     posts) and is freed when Run or RunOnce returns, as it then does;
//   - called from another goroutine while Run or RunOnce is in progress,
//     it stops the loop and waits for the running callback to return and
//     the loop to be freed.
//
// That wait can deadlock when the running callback waits for the goroutine
// calling Close. Close does not wait then: it returns an error that
// matches ErrWouldDeadlock, at once when the cycle goes through this
// package's own waits (the callback waits in Close, PostWait or
// Source.Remove for a loop whose callback calls this Close), or after the
// loop's close wait (SetCloseWait, DefaultCloseWait) in general. The loop
// is closed all the same: no callback starts after Close returned, and it
// is freed as soon as the running callback returns.
func (l *Loop) Close() error {
	c := l.c
	if !c.ref.close() {
		return ErrLoopClosed
	}
	close(c.closing)
	c.closePosts()
	// Close holds the owner's reference until its done below.
	c.stopCount.Add(1)
	if c.inC.Load() {
		C.eventq_loop_stop(c.ptr)
	}
	tid := int64(syscall.Gettid())
	run := c.runTid.Load()
	// A callback runs on the loop's OS thread, locked to it during a run:
	// another thread means another goroutine.
	wait := run != 0 && run != tid
	c.done()
	var err error
	if wait {
		if h := closeWaitHook.Load(); h != nil {
			(*h)()
		}
		err = c.waitFreed()
	}
	runtime.KeepAlive(l)
	return err
}

// waitFreed waits for the C loop to be freed after Close, unless that
// would deadlock (see Close).
func (c *loopCore) waitFreed() error {
	cycle, end := beginWait(c)
	defer end()
	if cycle {
		return fmt.Errorf("%w: Close from a callback of a loop that the running callback of this loop waits for", ErrWouldDeadlock)
	}
	d := time.Duration(c.closeWait.Load())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.freedCh:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: the running callback did not return within %v", ErrWouldDeadlock, d)
	}
}

// SetCloseWait sets how long Close, called from another goroutine while a
// callback of the loop runs, waits for it to return before it gives up
// with ErrWouldDeadlock (DefaultCloseWait unless set; at least 1 ms).
func (l *Loop) SetCloseWait(d time.Duration) {
	l.c.closeWait.Store(int64(max(d, time.Millisecond)))
}

// Dropped reports what the loop discarded so far: posts accepted by Post
// or PostWait that never ran (those pending when Close was called), and
// channel messages taken from their channel in a batch and never delivered
// because Source.Remove or Close cut the batch short. Every accepted post
// either runs or is counted here. Final once Close returned nil (called
// from a callback: once Run or RunOnce returned).
func (l *Loop) Dropped() (posts, msgs uint64) {
	return l.c.dropPosts.Load(), l.c.dropMsgs.Load()
}

// begin marks a run as in progress on this (locked) OS thread, or fails
// with ErrBusy, or ErrLoopClosed if Close came between the caller's use
// and here (Close then did not see the run, so it must not start).
func (c *loopCore) begin(mode int32) error {
	if !c.mode.CompareAndSwap(modeIdle, mode) {
		return ErrBusy
	}
	if c.ref.closed() {
		c.mode.Store(modeIdle)
		return ErrLoopClosed
	}
	tid := int64(syscall.Gettid())
	c.runTid.Store(tid)
	// Checked again now that Close can see the run.
	if c.ref.closed() {
		c.runTid.Store(0)
		c.mode.Store(modeIdle)
		return ErrLoopClosed
	}
	runnerEnter(tid)
	return nil
}

// end marks the run as over; deferred, so a Goexit in a callback runs it
// too.
func (c *loopCore) end() {
	runnerLeave(c.runTid.Load())
	c.runTid.Store(0)
	c.mode.Store(modeIdle)
}

// onLoopThread reports whether the caller runs on the OS thread running
// the loop: in a callback.
func (c *loopCore) onLoopThread() bool {
	t := c.runTid.Load()
	return t != 0 && t == int64(syscall.Gettid())
}

// Fd returns the loop's own fd, readable while some source has work or a
// post is pending: to embed the loop in another, poll it there and call
// RunOnce(0) when it is readable. It belongs to the loop: never close it.
// -1 after Close.
func (l *Loop) Fd() int {
	c := l.c
	defer runtime.KeepAlive(l)
	if !c.use() {
		return -1
	}
	defer c.done()
	return int(C.eventq_loop_fd(c.ptr))
}

// Run runs the loop on the calling goroutine until Stop (from any
// goroutine or a callback), Close, or a panic in a callback, which it
// returns as a *PanicError. A stop takes effect as soon as the running
// callback returns: no further callback runs, and what was not dispatched
// (channel messages, the rest of a batch, ready sources, posts) waits for
// the next run. A Stop made while the loop is not running makes the next
// Run return at once. Callbacks run on this goroutine (see the type's
// documentation for runtime.Goexit). ErrBusy if the loop is already
// running, ErrLoopClosed after Close.
func (l *Loop) Run() error {
	c := l.c
	if !c.use() {
		return ErrLoopClosed
	}
	defer c.done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.begin(modeRun); err != nil {
		return err
	}
	defer c.end()
	for {
		seen := c.stopCount.Load()
		if c.stopPending.Swap(false) || c.ref.closed() {
			break
		}
		if _, err := c.iterate(-1, seen); err != nil {
			return err
		}
		if err := c.takePanics(); err != nil {
			return err
		}
	}
	runtime.KeepAlive(l)
	return c.takePanics()
}

// RunOnce runs one iteration: it waits at most timeout for events
// (negative: without limit; 0: not at all) and dispatches them. It returns
// the number of callbacks run (one per channel message), and the panics
// recovered from them, if any (a *PanicError, or several joined). A Stop
// (or Close) made during the call ends it after the running callback; a
// Stop already pending does not, and stays pending for the next Run. The
// goroutine's OS thread is blocked while it waits, and locked to it for
// the call; callbacks run as for Run.
func (l *Loop) RunOnce(timeout time.Duration) (int, error) {
	c := l.c
	if !c.use() {
		return 0, ErrLoopClosed
	}
	defer c.done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.begin(modeRunOnce); err != nil {
		return 0, err
	}
	defer c.end()
	n, err := c.iterate(timeout, c.stopCount.Load())
	runtime.KeepAlive(l)
	if perr := c.takePanics(); perr != nil {
		return n, perr
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Stop makes Run return as soon as the running callback, if any, returns:
// no further callback runs, and what was not dispatched (channel messages,
// the rest of a batch, ready sources, posts) waits for the next run. If
// the loop is not running, the next Run returns at once. From any
// goroutine or callback.
func (l *Loop) Stop() error {
	c := l.c
	defer runtime.KeepAlive(l)
	if c.ref.closed() {
		return ErrLoopClosed
	}
	c.stopPending.Store(true)
	c.stop()
	return nil
}

// stop ends the current run after the running callback, waking the loop if
// it waits in the library.
func (c *loopCore) stop() {
	c.stopCount.Add(1)
	if c.inC.Load() && c.use() {
		C.eventq_loop_stop(c.ptr)
		c.done()
	}
}

// wake makes a loop that waits in the library (or an idle one, whose fd an
// embedder polls) return from the wait to run Go work: a post, or held
// messages of a source enabled again. At most one wake-up per wait.
func (c *loopCore) wake() {
	if (c.inC.Load() || c.mode.Load() == modeIdle) && c.woken.CompareAndSwap(false, true) && c.use() {
		C.eq_wake(c.ptr)
		c.done()
	}
}

// Post runs fn as a callback of the loop, after everything posted before
// it. From any goroutine. ErrWouldBlock when 4096 posts are already
// pending (PostWait waits for room instead); ErrLoopClosed after Close.
// A post that Post accepted (returned nil) runs, or, if the loop is closed
// first, never runs and is counted by Dropped. A panic in fn is handled as
// a callback's.
func (l *Loop) Post(fn func()) error {
	return l.enqueue(nil, false, fn)
}

// postWaitHook, if set (by the tests), runs each time PostWait is about to
// wait for room.
var postWaitHook atomic.Pointer[func()]

// PostWait is Post that waits for room while 4096 posts are pending, until
// there is, ctx is done (ctx.Err()), or the loop is closed
// (ErrLoopClosed). It waits on a Go channel, not spinning: room is given
// back as the loop takes posts from its queue, to the waiters in the order
// they came. A done ctx does not stop a PostWait that finds room at once.
// A post PostWait accepted runs or is counted by Dropped, as for Post.
//
// Called from a callback of the loop it does not wait, since the loop can
// make no room while its own callback waits: it returns ErrWouldBlock as
// Post does. Nor does it wait when the loop's running callback waits,
// through this package, for the caller (ErrWouldDeadlock; see Close).
func (l *Loop) PostWait(ctx context.Context, fn func()) error {
	return l.enqueue(ctx, true, fn)
}

// enqueue takes a post slot, waiting for one (if wait) until ctx is done
// or the loop closes, and queues fn.
func (l *Loop) enqueue(ctx context.Context, wait bool, fn func()) error {
	if fn == nil {
		return syscall.EINVAL
	}
	c := l.c
	select {
	case c.postSlots <- struct{}{}:
	default:
		if c.ref.closed() {
			return ErrLoopClosed
		}
		if !wait || c.onLoopThread() {
			return ErrWouldBlock
		}
		if h := postWaitHook.Load(); h != nil {
			(*h)()
		}
		cycle, end := beginWait(c)
		if cycle {
			end()
			return fmt.Errorf("%w: PostWait from a callback of a loop that the running callback of this loop waits for", ErrWouldDeadlock)
		}
		select {
		case c.postSlots <- struct{}{}:
		case <-ctx.Done():
			end()
			return ctx.Err()
		case <-c.closing:
			end()
			return ErrLoopClosed
		}
		end()
	}
	c.pmu.Lock()
	if c.postsClosed {
		c.pmu.Unlock()
		<-c.postSlots
		return ErrLoopClosed
	}
	c.posts = append(c.posts, fn)
	c.npost.Add(1)
	c.pmu.Unlock()
	c.wake()
	runtime.KeepAlive(l)
	return nil
}

// closePosts refuses posts from now on and counts those pending as
// dropped.
func (c *loopCore) closePosts() {
	c.pmu.Lock()
	c.postsClosed = true
	n := len(c.posts) - c.phead
	c.posts, c.phead = nil, 0
	c.npost.Store(0)
	c.pmu.Unlock()
	c.dropPosts.Add(uint64(n))
}

// nextPost takes the first pending post, or nil.
func (c *loopCore) nextPost() func() {
	c.pmu.Lock()
	if c.phead == len(c.posts) {
		c.pmu.Unlock()
		return nil
	}
	fn := c.posts[c.phead]
	c.posts[c.phead] = nil
	c.phead++
	if c.phead == len(c.posts) {
		c.posts, c.phead = c.posts[:0], 0
	}
	c.npost.Add(-1)
	c.pmu.Unlock()
	<-c.postSlots
	return fn
}

func (c *loopCore) recordPanic(err error) {
	c.mu.Lock()
	c.panics = append(c.panics, err)
	c.mu.Unlock()
	if c.mode.Load() == modeRun {
		c.stopCount.Add(1)
	}
}

func (c *loopCore) takePanics() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.panics
	c.panics = nil
	switch len(p) {
	case 0:
		return nil
	case 1:
		return p[0]
	default:
		return errors.Join(p...)
	}
}

// --- Sources ---------------------------------------------------------------

// Source is a source of a Loop, returned by its Add methods and passed to
// its callbacks. Its methods are safe from any goroutine and from any
// callback of the loop.
type Source struct {
	loop *loopCore
	id   uint64 // the loop's key for it (C userdata names it, not the Source)
	*srcHandle

	fdFn    FdFunc
	timerFn TimerFunc
	chanFn  ChanFunc
	batchFn ChanBatchFunc
	memcgFn MemcgFunc
	isChan  bool
	// budget: the messages a ChanFunc source delivers per iteration (it
	// takes them one at a time: its library source's own budget is 1).
	budget atomic.Int64
	// onDestroy runs when the source goes away (signal sources' cleanup).
	// It must not refer to the Loop (it is kept by the source's link).
	onDestroy func()

	// off: the source is disabled (SetEnabled(false), a callback's error,
	// panic or Goexit, end of stream); its queued events do not run.
	off atomic.Bool
	// held: messages of batches the source took and has not delivered
	// yet (a stop, disable, failure, panic or Goexit cut their batch
	// short); delivered first when the source runs again. The loop's
	// goroutine only; heldN is their count, for other goroutines.
	held  []event
	heldN atomic.Int64

	mu  sync.Mutex
	err error
}

// srcHandle is the source's C handle and the guard that frees it once: a
// separate object, so that a cleanup can free it when the Source is
// dropped without referring to the Source.
type srcHandle struct {
	// ptr is the *C.eventq_source (atomic.Pointer cannot hold an
	// incomplete C type); see handle and publish.
	ptr atomic.Pointer[byte]
	ref refGuard
	// ch: a ChanFunc source's own handle of its channel, which it takes
	// messages from, and the scratch it takes them into (the loop's
	// goroutine only); freed with the source's handle.
	ch      *C.eventq_chan
	scratch *C.eq_scratch
}

// add makes a source with call (one of the eq_add_* shims), passing it the
// handle of the source's link (userdata: the loop's sink and the source's
// id, nothing that refers to the Loop); on failure the library already
// ran the destroy hook, which deleted the handle.
func (l *Loop) add(s *Source, call func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int) (*Source, error) {
	c := l.c
	if !c.use() {
		if s.onDestroy != nil {
			s.onDestroy()
		}
		if s.srcHandle != nil && s.ch != nil {
			C.eventq_chan_free(s.ch)
		}
		return nil, ErrLoopClosed
	}
	defer c.done()
	s.loop = c
	if s.srcHandle == nil {
		s.srcHandle = &srcHandle{}
	}
	s.ref.init()
	// Registered before the add: the loop may collect an event for it
	// before the add call returns.
	c.mu.Lock()
	c.nextID++
	s.id = c.nextID
	c.sources[s.id] = s
	c.mu.Unlock()
	if s.isChan {
		c.sink.chans.Add(1)
	}
	h := newHandle(&srcLink{sink: c.sink, id: s.id, onDestroy: s.onDestroy})
	var out *C.eventq_source
	if rc, text := cCall(func() C.int { return call(c, C.uintptr_t(h), &out) }); rc < 0 {
		c.unregister(s)
		if s.ch != nil {
			C.eventq_chan_free(s.ch)
		}
		return nil, withText(errOf(rc), text)
	}
	runtime.KeepAlive(l)
	// A callback may have run (and published the same pointer) already.
	s.publish(out)
	// Freed by its cleanup if the Source is dropped without Remove.
	runtime.AddCleanup(s, (*srcHandle).release, s.srcHandle)
	return s, nil
}

// unregister forgets a source (Remove, or its add failed).
func (c *loopCore) unregister(s *Source) {
	c.mu.Lock()
	_, ok := c.sources[s.id]
	delete(c.sources, s.id)
	c.mu.Unlock()
	if ok && s.isChan {
		c.sink.chans.Add(-1)
	}
}

// AddFd calls fn when fd is ready for events (In, Out, Pri, RdHup; Fault and
// Hup are always reported; level-triggered unless Edge; OneShot disables
// the source after one event). The fd stays the caller's: remove the
// source before closing it. Never pass an fd Go's netpoller owns (an
// os.File or net.Conn's); dup it first.
func (l *Loop) AddFd(fd int, events Events, fn FdFunc) (*Source, error) {
	if fn == nil {
		return nil, syscall.EINVAL
	}
	return l.add(&Source{fdFn: fn}, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_fd(c.ptr, C.int(fd), C.uint32_t(events), h, out)
	})
}

// AddTimer calls fn first after first (0: at once), then every interval if
// it is not 0, on the monotonic clock. A one-shot timer disables itself
// after firing; Source.SetTimer re-arms it.
func (l *Loop) AddTimer(first, interval time.Duration, fn TimerFunc) (*Source, error) {
	if fn == nil || first < 0 || interval < 0 {
		return nil, syscall.EINVAL
	}
	return l.add(&Source{timerFn: fn}, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_timer(c.ptr, C.uint64_t(first), C.uint64_t(interval), h, out)
	})
}

// AddChan calls fn once per message of ch, in order, at most the source's
// budget per iteration (default 256, Source.SetBudget) so a busy channel
// cannot starve other sources; then once with eof at end of stream. A
// message is taken only to be delivered (see ChanFunc). The source holds
// its own reference to the channel: ch may be released. Each message is
// copied into Go memory for fn (one allocation per message).
func (l *Loop) AddChan(ch *Chan, fn ChanFunc) (*Source, error) {
	if fn == nil || ch == nil {
		return nil, syscall.EINVAL
	}
	return l.addChan(ch, &Source{chanFn: fn, isChan: true}, 1)
}

// AddChanBatch calls fn once per batch of messages of ch: all the messages
// the channel holds, up to the source's budget (default 256,
// Source.SetBudget), taken in order with one cgo crossing
// (eventq_loop_add_chan_batch) and copied into Go memory in one piece;
// then once with eof at end of stream. For a consumer that handles
// messages several at a time, it costs a fraction of AddChan's per
// message. Every message taken is delivered (see ChanBatchFunc). The
// source holds its own reference to the channel: ch may be released.
func (l *Loop) AddChanBatch(ch *Chan, fn ChanBatchFunc) (*Source, error) {
	if fn == nil || ch == nil {
		return nil, syscall.EINVAL
	}
	return l.addChan(ch, &Source{batchFn: fn, isChan: true}, C.EVENTQ_DEFAULT_BUDGET)
}

// addChan adds a channel source with the library budget given: 1 for a
// ChanFunc source, which takes the rest of its iteration's messages
// itself, from its own handle of the channel.
func (l *Loop) addChan(ch *Chan, s *Source, budget C.size_t) (*Source, error) {
	if !ch.use(refOther) {
		return nil, ErrReleased
	}
	defer ch.done(refOther)
	s.budget.Store(C.EVENTQ_DEFAULT_BUDGET)
	if s.chanFn != nil {
		s.srcHandle = &srcHandle{ch: C.eventq_chan_clone(ch.ptr)}
		if s.ch == nil {
			return nil, syscall.ENOMEM
		}
	}
	return l.add(s, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_chan(c.ptr, ch.ptr, budget, h, out)
	})
}

// AddSignal calls fn on the loop's goroutine when sig arrives.
//
// Unlike the C library's eventq_loop_add_signal (a signalfd, which only
// sees a signal blocked in every thread), it is built on os/signal: the Go
// runtime unblocks signals in each thread it starts, so a signalfd in a Go
// program would miss process-directed signals. The signal is registered
// with signal.Notify (for as long as the source exists: removing it calls
// signal.Stop) and forwarded through a libeventq channel watched by a
// channel source, so fn runs on the loop's goroutine like any callback.
// Signals that arrive faster than the loop handles them coalesce, as
// signals do.
func (l *Loop) AddSignal(sig syscall.Signal, fn SignalFunc) (*Source, error) {
	if fn == nil || sig <= 0 {
		return nil, syscall.EINVAL
	}
	ch, err := NewChan(WithCapacity(16), WithMaxMessageSize(4))
	if err != nil {
		return nil, err
	}
	sigc := make(chan os.Signal, 16)
	quit := make(chan struct{})
	var stopOnce sync.Once
	s := &Source{
		isChan: true,
		chanFn: func(src *Source, msg []byte, eof bool) error {
			if eof || len(msg) != 4 {
				return nil
			}
			return fn(src, syscall.Signal(binary.LittleEndian.Uint32(msg)))
		},
		onDestroy: func() {
			stopOnce.Do(func() {
				signal.Stop(sigc)
				close(quit)
				ch.Close()
				ch.Release()
			})
		},
	}
	signal.Notify(sigc, sig)
	go func() {
		var b [4]byte
		for {
			select {
			case <-quit:
				return
			case v := <-sigc:
				if n, ok := v.(syscall.Signal); ok {
					binary.LittleEndian.PutUint32(b[:], uint32(n))
					ch.TrySend(b[:]) // full: the signal coalesces
				}
			}
		}
	}()
	return l.addChan(ch, s, 1)
}

// use takes a reference to the source's handle; done gives it back and
// frees the handle after Remove (or Close of the loop) and its last use.
func (s *srcHandle) use() (*C.eventq_source, bool) {
	if !s.ref.acquire() {
		return nil, false
	}
	return s.handle(), true
}

func (s *srcHandle) done() {
	if s.ref.release() {
		C.eventq_source_free(s.handle())
		if s.ch != nil {
			C.eventq_chan_free(s.ch)
		}
		if s.scratch != nil {
			C.free(s.scratch.buf)
			C.free(unsafe.Pointer(s.scratch))
		}
	}
}

// release is the cleanup of a dropped Source: it closes the guard and
// frees the handle, unless Remove or the loop's Close already did.
func (s *srcHandle) release() {
	if s.ref.close() {
		s.done()
	}
}

func (s *srcHandle) handle() *C.eventq_source {
	return (*C.eventq_source)(unsafe.Pointer(s.ptr.Load()))
}

// publish records the handle the first time it is known: from the add
// call's out, or from an event collected before its add call returned (the
// library passes callbacks that same pointer).
func (s *srcHandle) publish(p *C.eventq_source) {
	if s.ptr.Load() == nil && p != nil {
		s.ptr.CompareAndSwap(nil, (*byte)(unsafe.Pointer(p)))
	}
}

// removed reports whether Remove (or Close of the loop) removed it.
func (s *Source) removed() bool { return s.ref.closed() }

// Remove removes the source: once it returns, its callback never runs
// again (even for an event already fetched in the current iteration; from
// another goroutine while the callback runs, it first waits for it to
// return). Safe from any callback, the source's own included. ErrRemoved
// if it was already removed, or its loop closed. Messages of a batch the
// source took and had not delivered are dropped, counted by Loop.Dropped.
// If the wait for the running callback would deadlock (that callback
// waits, through this package, for the caller: see Loop.Close), Remove
// does not wait and returns ErrWouldDeadlock; the source is removed all
// the same.
func (s *Source) Remove() error {
	if !s.ref.close() {
		return ErrRemoved
	}
	rc := C.eventq_source_remove(s.handle())
	c := s.loop
	c.unregister(s)
	err := c.waitNotRunning(s)
	s.done()
	if err != nil {
		return err
	}
	return errOf(rc)
}

// SetEnabled enables or disables the source. A disabled source's callback
// does not run; enabling re-arms a fired OneShot fd source.
//
// Enabling a channel source that holds messages of a batch cut short
// delivers them first, at the loop's next turn.
func (s *Source) SetEnabled(enabled bool) error {
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	on := C.int(0)
	if enabled {
		on = 1
	}
	if rc, text := cCall(func() C.int { return C.eventq_source_set_enabled(p, on) }); rc < 0 {
		return withText(errOf(rc), text)
	}
	s.off.Store(!enabled)
	if enabled && s.heldN.Load() > 0 {
		s.loop.wake()
	}
	return nil
}

// SetEvents changes the events an fd source waits for.
func (s *Source) SetEvents(events Events) error {
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	rc, text := cCall(func() C.int { return C.eventq_source_set_events(p, C.uint32_t(events)) })
	return withText(errOf(rc), text)
}

// SetTimer re-arms (and enables) a timer source: first from now, then
// every interval if not 0.
func (s *Source) SetTimer(first, interval time.Duration) error {
	if first < 0 || interval < 0 {
		return syscall.EINVAL
	}
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	rc, text := cCall(func() C.int {
		return C.eventq_source_set_timer(p, C.uint64_t(first), C.uint64_t(interval))
	})
	return withText(errOf(rc), text)
}

// SetBudget sets how many messages a channel source delivers per loop
// iteration (at least 1; default 256): after that many, the other ready
// sources and posts have their turn. For AddChanBatch it is also the most
// messages a batch holds.
func (s *Source) SetBudget(n int) error {
	if n < 1 {
		return syscall.EINVAL
	}
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	if s.chanFn != nil {
		s.budget.Store(int64(n))
		return nil
	}
	rc, text := cCall(func() C.int { return C.eventq_source_set_budget(p, C.size_t(n)) })
	return withText(errOf(rc), text)
}

// pull takes the next message of a ChanFunc source's channel into Go
// memory; false when there is none (empty, end of stream, or an error,
// which the source's library side then reports). The caller holds a
// reference to the source's handle (its channel handle and scratch live
// as long). The scratch is C memory: no pointer check on each call.
func (s *Source) pull() ([]byte, bool) {
	h := s.srcHandle
	if h.scratch == nil {
		h.grow(256)
	}
	for {
		rc := C.eq_pull(h.ch, h.scratch.buf, h.scratch.cap, &h.scratch.len)
		n := int(h.scratch.len)
		if rc == 0 {
			msg := make([]byte, n)
			copy(msg, unsafe.Slice((*byte)(h.scratch.buf), n))
			return msg, true
		}
		if rc != -C.EMSGSIZE {
			return nil, false
		}
		h.grow(n)
	}
}

// grow makes the pull scratch at least n bytes.
func (h *srcHandle) grow(n int) {
	if h.scratch == nil {
		h.scratch = (*C.eq_scratch)(C.calloc(1, C.sizeof_eq_scratch))
	}
	C.free(h.scratch.buf)
	h.scratch.buf = C.malloc(C.size_t(max(n, 1)))
	h.scratch.cap = C.size_t(max(n, 1))
}

// Err returns the error that last disabled the source: the error its
// callback returned, or the *PanicError recovered from it; nil if none.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// fail records the error that disables the source (a callback's error,
// panic or Goexit) and disables it.
func (s *Source) fail(err error) {
	s.setErr(err)
	s.off.Store(true)
	if p, ok := s.use(); ok {
		C.eventq_source_set_enabled(p, 0)
		s.done()
	}
}

func (s *Source) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}
