// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

/*
#include <stdint.h>
#include <eventq.h>

// The Go trampolines of callbacks.go (declared by cgo in _cgo_export.h).
extern int eqGoFd(eventq_source *src, int fd, uint32_t revents, uintptr_t h);
extern int eqGoTimer(eventq_source *src, uint64_t expirations, uintptr_t h);
extern int eqGoChan(eventq_source *src, void *data, size_t len, uintptr_t h);
extern void eqGoPost(uintptr_t h);
extern void eqGoDestroy(uintptr_t h);
extern void eqGoFinish(uintptr_t h);

// The C callbacks the library calls. userdata carries a cgo.Handle, an
// integer: Go only ever passes it as uintptr_t, and only C code casts it to
// and from the ABI's void *.
static int eq_fd_cb(eventq_source *s, int fd, uint32_t ev, void *ud) {
	return eqGoFd(s, fd, ev, (uintptr_t)ud);
}
static int eq_timer_cb(eventq_source *s, uint64_t n, void *ud) {
	return eqGoTimer(s, n, (uintptr_t)ud);
}
static int eq_chan_cb(eventq_source *s, const void *data, size_t len, void *ud) {
	return eqGoChan(s, (void *)data, len, (uintptr_t)ud);
}
static void eq_post_cb(void *arg) { eqGoPost((uintptr_t)arg); }
static void eq_destroy_cb(void *ud) { eqGoDestroy((uintptr_t)ud); }

static int eq_add_fd(const eventq_loop *lp, int fd, uint32_t events, uintptr_t h,
                     eventq_source **out) {
	return eventq_loop_add_fd(lp, fd, events, eq_fd_cb, (void *)h, eq_destroy_cb, out);
}
static int eq_add_timer(const eventq_loop *lp, uint64_t first, uint64_t interval,
                        uintptr_t h, eventq_source **out) {
	return eventq_loop_add_timer(lp, first, interval, eq_timer_cb, (void *)h, eq_destroy_cb, out);
}
static int eq_add_chan(const eventq_loop *lp, const eventq_chan *ch, uintptr_t h,
                       eventq_source **out) {
	return eventq_loop_add_chan(lp, ch, eq_chan_cb, (void *)h, eq_destroy_cb, out);
}
static int eq_post(const eventq_loop *lp, uintptr_t h) {
	// No destroy: Post tracks pending handles itself (see forgetPost).
	return eventq_loop_post(lp, eq_post_cb, (void *)h, NULL);
}

// Calls back into Go, so that a run's coroutine is ended at the callback
// depth it was made at (see exec.go). A Goexit passed on there pops this
// frame, which holds nothing.
static void eq_finish(uintptr_t h) { eqGoFinish(h); }
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
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
type ChanFunc func(src *Source, msg []byte, eof bool) error

// SignalFunc is called when a signal source's signal arrived. Errors as for
// FdFunc.
type SignalFunc func(src *Source, sig syscall.Signal) error

// liveHandles counts cgo.Handles made by this package and not yet deleted
// (for the tests: every one must be deleted exactly once).
var liveHandles atomic.Int64

func newHandle(v any) cgo.Handle {
	liveHandles.Add(1)
	return cgo.NewHandle(v)
}

func deleteHandle(h cgo.Handle) {
	h.Delete()
	liveHandles.Add(-1)
}

const (
	modeIdle int32 = iota
	modeRun
	modeRunOnce
)

// Loop is a libeventq event loop: an epoll dispatcher over fd, timer,
// channel and signal sources, with posts and Stop from any goroutine.
// Callbacks are Go functions run one at a time, with no library lock held,
// while Run or RunOnce waits for them on its OS thread; they may add and
// remove sources (their own included), post, and stop or close the loop.
//
// A panic in a callback is recovered: its source is disabled, Run stops
// after the current callback, and Run (or RunOnce) returns a *PanicError.
// A callback's non-nil error only disables its source (Source.Err).
//
// # runtime.Goexit in a callback
//
// A callback that calls runtime.Goexit (t.FailNow, t.SkipNow, ...) ends
// the goroutine that called Run or RunOnce, as it would if the callback
// were an ordinary function call: the callback's deferred calls run, its
// source is disabled with Source.Err returning ErrGoexit, no other callback
// runs, the loop's C call returns normally, and the goroutine then exits,
// its deferred calls run, without Run or RunOnce returning. The loop is
// left idle and usable: another Run, Close and the rest work as before.
// Each callback runs in a coroutine of the calling goroutine for this (see
// exec.go); so a callback must leave its goroutine's OS thread lock as it
// found it (runtime.LockOSThread and UnlockOSThread in pairs), or the
// runtime aborts at the coroutine switch.
//
// Close frees the loop. A finalizer closes a forgotten loop, but only as a
// backstop: it cannot run while a source's callback refers to the Loop.
type Loop struct {
	c *loopCore
}

// loopCore is the state sources and trampolines refer to; the Loop the user
// holds is a separate object so that its finalizer can run.
type loopCore struct {
	ptr  *C.eventq_loop
	ref  refGuard
	mode atomic.Int32
	self cgo.Handle // this loopCore, for eqGoFinish; deleted by free

	// exec runs the current run's callbacks; only the goroutine running the
	// loop (and its coroutine) use it.
	exec executor

	// Post room: a token per pending post, taken before eventq_loop_post
	// and given back when the post leaves the queue, so PostWait can wait
	// for room on a Go channel (the C ABI has no fd for it). Only Go posts
	// to this loop: its C handle is not exposed.
	postSlots chan struct{}
	closing   chan struct{} // closed by Close: PostWait stops waiting

	mu      sync.Mutex
	changed sync.Cond // a run ended or the loop was freed; L is mu
	runTid  int       // the OS thread running the loop, 0 when idle
	freed   bool
	panics  []error
	sources map[*Source]struct{}
	posts   map[cgo.Handle]struct{}
}

// NewLoop creates a loop.
func NewLoop() (*Loop, error) {
	var p *C.eventq_loop
	if rc := C.eventq_loop_new(&p); rc < 0 {
		return nil, errOf(rc)
	}
	c := &loopCore{
		ptr:       p,
		postSlots: make(chan struct{}, C.EVENTQ_POST_CAPACITY),
		closing:   make(chan struct{}),
		sources:   make(map[*Source]struct{}),
		posts:     make(map[cgo.Handle]struct{}),
	}
	c.changed.L = &c.mu
	c.self = newHandle(c)
	c.ref.init()
	l := &Loop{c: c}
	runtime.SetFinalizer(l, (*Loop).finalize)
	return l, nil
}

func (c *loopCore) use() bool { return c.ref.acquire() }

func (c *loopCore) done() {
	if c.ref.release() {
		c.free()
	}
}

// free frees the C loop (every source's destroy hook runs here, deleting
// its handle), deletes the handles of posts that will never run, and
// releases the source handles still held.
func (c *loopCore) free() {
	C.eventq_loop_free(c.ptr)
	c.mu.Lock()
	posts, sources := c.posts, c.sources
	c.posts, c.sources = nil, nil
	c.freed = true
	c.changed.Broadcast()
	c.mu.Unlock()
	for h := range posts {
		deleteHandle(h)
	}
	for s := range sources {
		if s.ref.close() {
			s.done()
		}
	}
	deleteHandle(c.self)
}

// closeWaitHook, if set (by the tests), runs when Close starts waiting for
// a run in another goroutine.
var closeWaitHook atomic.Pointer[func()]

// Close stops the loop and frees it: every source goes away, posts not yet
// run are discarded, and Source methods return ErrRemoved. A second Close
// returns ErrLoopClosed.
//
// Once Close returns, no callback runs, as once Source.Remove returns:
//   - called from a callback, it stops the loop, which runs no other
//     callback (not the rest of a channel source's messages, which stay in
//     the channel, nor other ready sources, nor posts) and is freed when
//     Run or RunOnce returns, as it then does;
//   - called from another goroutine while Run or RunOnce is in progress,
//     it stops the loop and waits for the run to return (so never call it
//     from a goroutine that a callback waits for) and the loop to be freed.
func (l *Loop) Close() error {
	c := l.c
	if !c.ref.close() {
		return ErrLoopClosed
	}
	runtime.SetFinalizer(l, nil)
	close(c.closing)
	C.eventq_loop_stop(c.ptr)
	c.mu.Lock()
	// A callback runs on the loop's OS thread, and nothing else does during
	// a run (it is locked to it): another thread means another goroutine.
	wait := c.runTid != 0 && c.runTid != syscall.Gettid()
	c.mu.Unlock()
	c.done()
	if wait {
		if h := closeWaitHook.Load(); h != nil {
			(*h)()
		}
		c.mu.Lock()
		for !c.freed {
			c.changed.Wait()
		}
		c.mu.Unlock()
	}
	runtime.KeepAlive(l)
	return nil
}

func (l *Loop) finalize() {
	if l.c.ref.close() {
		close(l.c.closing)
		l.c.done()
	}
}

// begin marks a run as in progress on this (locked) OS thread, or fails
// with ErrBusy, or ErrLoopClosed if Close came between the caller's use
// and here (Close then did not see the run, so it must not start).
func (c *loopCore) begin(mode int32) error {
	if !c.mode.CompareAndSwap(modeIdle, mode) {
		return ErrBusy
	}
	tid := syscall.Gettid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ref.closed() {
		c.mode.Store(modeIdle)
		return ErrLoopClosed
	}
	c.runTid = tid
	return nil
}

// end marks the run as over; deferred, so a Goexit passed on by finish
// runs it too.
func (c *loopCore) end() {
	c.mu.Lock()
	c.runTid = 0
	c.changed.Broadcast()
	c.mu.Unlock()
	c.mode.Store(modeIdle)
}

// finish ends the run's coroutine, if one was started, at the end of Run
// or RunOnce (still locked to the OS thread). If a callback called
// runtime.Goexit, the calling goroutine exits here (exec.go).
func (c *loopCore) finish() {
	if c.exec.next != nil {
		C.eq_finish(C.uintptr_t(c.self))
	}
}

// onLoopThread reports whether the caller runs on the OS thread running
// the loop: in a callback.
func (c *loopCore) onLoopThread() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runTid != 0 && c.runTid == syscall.Gettid()
}

// Fd returns the loop's own fd, readable while some source has work: to
// embed the loop in another, poll it there and call RunOnce(0) when it is
// readable. It belongs to the loop: never close it. -1 after Close.
func (l *Loop) Fd() int {
	c := l.c
	defer runtime.KeepAlive(l)
	if !c.use() {
		return -1
	}
	defer c.done()
	return int(C.eventq_loop_fd(c.ptr))
}

// Run runs the loop on the calling goroutine, locked to its OS thread,
// until Stop (from any goroutine or a callback), Close, or a panic in a
// callback, which it returns as a *PanicError. A stop takes effect as soon
// as the running callback returns: no further callback runs, and what was
// not dispatched waits for the next run. A Stop made while the loop is not
// running makes the next Run return at once. Callbacks run on this
// goroutine's OS thread while it waits (see the type's documentation for
// runtime.Goexit). ErrBusy if the loop is already running, ErrLoopClosed
// after Close.
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
	rc := C.eventq_loop_run(c.ptr)
	c.finish()
	runtime.KeepAlive(l)
	if err := c.takePanics(); err != nil {
		return err
	}
	return errOf(rc)
}

// RunOnce runs one iteration: it waits at most timeout for events
// (negative: without limit; 0: not at all) and dispatches them. It returns
// the number of callbacks run, and the panics recovered from them, if any
// (a *PanicError, or several joined). A Stop (or Close) made during the
// call ends it after the running callback; a Stop already pending does
// not, and stays pending for the next Run. The goroutine's OS thread is
// blocked while it waits, and locked to it for the call; callbacks run as
// for Run.
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
	ns := C.int64_t(C.EVENTQ_FOREVER)
	if timeout >= 0 {
		ns = C.int64_t(timeout)
	}
	rc := C.eventq_loop_run_once(c.ptr, ns)
	c.finish()
	runtime.KeepAlive(l)
	if err := c.takePanics(); err != nil {
		return max(int(rc), 0), err
	}
	if rc < 0 {
		return 0, errOf(rc)
	}
	return int(rc), nil
}

// Stop makes Run return as soon as the running callback, if any, returns:
// no further callback runs, and what was not dispatched (channel messages,
// ready sources, posts) waits for the next run. If the loop is not
// running, the next Run returns at once. From any goroutine or callback.
func (l *Loop) Stop() error {
	c := l.c
	defer runtime.KeepAlive(l)
	if !c.use() {
		return ErrLoopClosed
	}
	defer c.done()
	return errOf(C.eventq_loop_stop(c.ptr))
}

type post struct {
	loop *loopCore
	fn   func()
}

// Post runs fn as a callback of the loop, after everything posted before
// it. From any goroutine. ErrWouldBlock when 4096 posts are already
// pending (PostWait waits for room instead). Posts still pending when the
// loop is closed never run. A panic in fn is handled as a callback's.
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
//
// Called from a callback of the loop it does not wait, since the loop can
// make no room while its own callback waits: it returns ErrWouldBlock as
// Post does.
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
		select {
		case c.postSlots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closing:
			return ErrLoopClosed
		}
	}
	err := c.post(fn)
	runtime.KeepAlive(l)
	return err
}

// post queues fn; the caller holds a post slot, which is given back if the
// post fails (else when it leaves the queue, or never once freed).
func (c *loopCore) post(fn func()) error {
	if !c.use() {
		<-c.postSlots
		return ErrLoopClosed
	}
	defer c.done()
	h := newHandle(&post{loop: c, fn: fn})
	c.mu.Lock()
	c.posts[h] = struct{}{}
	c.mu.Unlock()
	if rc := C.eq_post(c.ptr, C.uintptr_t(h)); rc < 0 {
		c.forgetPost(h)
		return errOf(rc)
	}
	return nil
}

// forgetPost deletes a post's handle and gives back its slot, unless free
// already did the one (the slots no longer matter then).
func (c *loopCore) forgetPost(h cgo.Handle) {
	c.mu.Lock()
	_, ok := c.posts[h]
	delete(c.posts, h)
	c.mu.Unlock()
	if ok {
		deleteHandle(h)
		<-c.postSlots
	}
}

func (c *loopCore) recordPanic(err error) {
	c.mu.Lock()
	c.panics = append(c.panics, err)
	c.mu.Unlock()
	if c.mode.Load() == modeRun {
		C.eventq_loop_stop(c.ptr)
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
	// ptr is the *C.eventq_source (atomic.Pointer cannot hold an
	// incomplete C type); see handle and publish.
	ptr atomic.Pointer[byte]
	ref refGuard

	fdFn    FdFunc
	timerFn TimerFunc
	chanFn  ChanFunc
	memcgFn MemcgFunc
	// onDestroy runs when the source goes away (signal sources' cleanup).
	onDestroy func()

	mu           sync.Mutex
	err          error
	unregistered bool // guarded by loop.mu
}

// add makes a source with call (one of the eq_add_* shims), passing it the
// source's handle; on failure the library already ran the destroy hook,
// which deleted the handle.
func (l *Loop) add(s *Source, call func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int) (*Source, error) {
	c := l.c
	if !c.use() {
		if s.onDestroy != nil {
			s.onDestroy()
		}
		return nil, ErrLoopClosed
	}
	defer c.done()
	s.loop = c
	s.ref.init()
	h := newHandle(s)
	var out *C.eventq_source
	if rc := call(c, C.uintptr_t(h), &out); rc < 0 {
		return nil, errOf(rc)
	}
	runtime.KeepAlive(l)
	// A callback may have run (and published the same pointer) already.
	s.publish(out)
	c.mu.Lock()
	if !s.unregistered && c.sources != nil {
		c.sources[s] = struct{}{}
	}
	c.mu.Unlock()
	return s, nil
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
// cannot starve other sources; then once with eof at end of stream. The
// source holds its own reference to the channel: ch may be released.
// Each message is copied into Go memory for fn (one allocation per
// message).
func (l *Loop) AddChan(ch *Chan, fn ChanFunc) (*Source, error) {
	if fn == nil || ch == nil {
		return nil, syscall.EINVAL
	}
	if !ch.use(refOther) {
		return nil, ErrReleased
	}
	defer ch.done(refOther)
	return l.add(&Source{chanFn: fn}, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_chan(c.ptr, ch.ptr, h, out)
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
	return l.add(s, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_chan(c.ptr, ch.ptr, h, out)
	})
}

// use takes a reference to the source's handle; done gives it back and
// frees the handle after Remove (or Close of the loop) and its last use.
func (s *Source) use() (*C.eventq_source, bool) {
	if !s.ref.acquire() {
		return nil, false
	}
	return s.handle(), true
}

func (s *Source) done() {
	if s.ref.release() {
		C.eventq_source_free(s.handle())
	}
}

func (s *Source) handle() *C.eventq_source {
	return (*C.eventq_source)(unsafe.Pointer(s.ptr.Load()))
}

// publish records the handle the first time it is known: from the add
// call's out, or from a callback that ran before its add call returned (the
// library passes callbacks that same pointer).
func (s *Source) publish(p *C.eventq_source) {
	if s.ptr.Load() == nil {
		s.ptr.CompareAndSwap(nil, (*byte)(unsafe.Pointer(p)))
	}
}

// Remove removes the source: once it returns, its callback never runs
// again (even for an event already fetched in the current iteration; from
// another goroutine while the callback runs, it first waits for it to
// return). Safe from any callback, the source's own included. ErrRemoved
// if it was already removed, or its loop closed.
func (s *Source) Remove() error {
	if !s.ref.close() {
		return ErrRemoved
	}
	rc := C.eventq_source_remove(s.handle())
	if l := s.loop; l != nil {
		l.mu.Lock()
		s.unregistered = true
		delete(l.sources, s)
		l.mu.Unlock()
	}
	s.done()
	return errOf(rc)
}

// SetEnabled enables or disables the source. A disabled source's callback
// does not run; enabling re-arms a fired OneShot fd source.
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
	return errOf(C.eventq_source_set_enabled(p, on))
}

// SetEvents changes the events an fd source waits for.
func (s *Source) SetEvents(events Events) error {
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	return errOf(C.eventq_source_set_events(p, C.uint32_t(events)))
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
	return errOf(C.eventq_source_set_timer(p, C.uint64_t(first), C.uint64_t(interval)))
}

// SetBudget sets how many messages a channel source delivers per loop
// iteration (at least 1; default 256): after that many, the other ready
// sources and posts have their turn. The only source of a loop driven by
// Run has none to give a turn to and goes on without waiting on epoll;
// RunOnce always stops at the budget.
func (s *Source) SetBudget(n int) error {
	if n < 1 {
		return syscall.EINVAL
	}
	p, ok := s.use()
	if !ok {
		return ErrRemoved
	}
	defer s.done()
	return errOf(C.eventq_source_set_budget(p, C.size_t(n)))
}

// Err returns the error that last disabled the source: the error its
// callback returned, or the *PanicError recovered from it; nil if none.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// call runs a callback for the library: it publishes the source's handle
// (a callback may run before its Add returned), recovers a panic, and
// turns the outcome into the C return code.
func (s *Source) call(src *C.eventq_source, fn func() error) (rc C.int) {
	s.publish(src)
	defer func() {
		if r := recover(); r != nil {
			perr := &PanicError{Value: r, Stack: debug.Stack()}
			s.setErr(perr)
			s.loop.recordPanic(perr)
			rc = -C.int(syscall.ENOTRECOVERABLE)
		}
	}()
	if err := fn(); err != nil {
		s.setErr(err)
		return callbackCode(err)
	}
	return 0
}

func (s *Source) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}
