// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

func newLoop(t *testing.T) *eventq.Loop {
	t.Helper()
	lp, err := eventq.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	return lp
}

func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Close(p[0])
		syscall.Close(p[1])
	})
	return p[0], p[1]
}

// checkHandles fails if the test left cgo.Handles behind: every source's
// destroy hook must have deleted its link's handle exactly once (a second
// Delete would panic).
func checkHandles(t *testing.T) {
	before := eventq.LiveHandles()
	t.Cleanup(func() {
		if n := eventq.LiveHandles(); n != before {
			t.Errorf("cgo handles: %d live after the test, %d before", n, before)
		}
	})
}

// D1-D3 and D8 through a Go loop: a channel source calls back once per
// message, in order, then once at end of stream.
func TestLoopChanSource(t *testing.T) {
	checkHandles(t)
	const producers, per = 8, 5000
	lp := newLoop(t)
	c := newChan(t, eventq.WithCapacity(64))
	tr := newTracker(producers, per)
	v := tr.consumer()
	eofs := 0
	src, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, eof bool) error {
		if eof {
			eofs++
			return lp.Stop()
		}
		v.add(msg)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.SetBudget(32); err != nil {
		t.Fatal(err)
	}
	go func() {
		goN(producers, func(p int) {
			for seq := uint64(0); seq < per; seq++ {
				if err := c.Send(context.Background(), makeMsg(uint32(p), seq)); err != nil {
					t.Error(err)
					return
				}
			}
		})
		c.Close()
	}()
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	tr.verify(t)
	if eofs != 1 {
		t.Fatalf("%d end-of-stream callbacks", eofs)
	}
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := src.Remove(); !errors.Is(err, eventq.ErrRemoved) || !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("second Remove: %v", err)
	}
	totalMessages.Add(producers * per)
}

// Run with one busy channel source goes from budget to budget without
// waiting on epoll, but a post or a stop made by its callback with thousands
// of messages still queued takes effect within two budgets; alone again,
// the source drains the rest in one Run.
func TestLoopLoneBusyChanSource(t *testing.T) {
	checkHandles(t)
	const queued, budget, at = 5000, 16, 100
	lp := newLoop(t)
	c := newChan(t, eventq.WithCapacity(queued))
	for i := 0; i < queued; i++ {
		if err := c.TrySend(binary.LittleEndian.AppendUint32(nil, uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
	msgs, eofs, postAt := 0, 0, -1 // touched by the loop goroutine only
	src, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, eof bool) error {
		if eof {
			eofs++
			return lp.Stop()
		}
		if got := int(binary.LittleEndian.Uint32(msg)); got != msgs {
			t.Errorf("message %d where %d was due", got, msgs)
		}
		msgs++
		switch msgs {
		case at:
			return lp.Post(func() { postAt = msgs })
		case 4 * at:
			return lp.Stop()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.SetBudget(budget); err != nil {
		t.Fatal(err)
	}
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if postAt < at || postAt > at+2*budget {
		t.Fatalf("the post ran after message %d", postAt)
	}
	if msgs != 4*at {
		t.Fatalf("the stop ended the dispatch after %d messages", msgs)
	}
	c.Close()
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if msgs != queued || eofs != 1 {
		t.Fatalf("%d messages, %d end-of-stream callbacks", msgs, eofs)
	}
}

// Posts run on the loop goroutine in the order posted, from any goroutine.
func TestLoopPostOrder(t *testing.T) {
	checkHandles(t)
	const posters, per = 4, 500
	lp := newLoop(t)
	var got [posters][]int // touched by the loop goroutine only
	goN(posters, func(p int) {
		for i := 0; i < per; i++ {
			if err := lp.Post(func() { got[p] = append(got[p], i) }); err != nil {
				t.Error(err)
				return
			}
		}
	})
	nested := false
	lp.Post(func() {
		lp.Post(func() { nested = true; lp.Stop() })
	})
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	for p := range got {
		if len(got[p]) != per {
			t.Fatalf("poster %d: %d posts ran", p, len(got[p]))
		}
		for i, v := range got[p] {
			if v != i {
				t.Fatalf("poster %d: post %d ran as number %d", p, v, i)
			}
		}
	}
	if !nested {
		t.Fatal("post made by a post did not run")
	}
	// Posts still pending at Close never run; their handles are deleted.
	lp2, _ := eventq.NewLoop()
	ran := false
	lp2.Post(func() { ran = true })
	lp2.Close()
	if ran {
		t.Fatal("a post ran after Close")
	}
	if err := lp2.Post(func() {}); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("Post after Close: %v", err)
	}
}

func TestLoopStopAndClose(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	done := make(chan error)
	go func() { done <- lp.Run() }()
	lp.Stop() // sticky: works whether Run has started or not
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Close from another goroutine while Run waits: Run returns, the loop
	// is freed after it, and its sources are gone.
	lp2, _ := eventq.NewLoop()
	c := newChan(t)
	src, err := lp2.AddChan(c, func(*eventq.Source, []byte, bool) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	lp2.Post(func() { close(started) })
	go func() { done <- lp2.Run() }()
	<-started
	if err := lp2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := lp2.Close(); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := src.SetEnabled(false); !errors.Is(err, eventq.ErrRemoved) {
		t.Fatalf("source of a closed loop: %v", err)
	}
	if err := lp2.Run(); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

func TestLoopTimers(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	var periodic, oneShot uint64
	var oneShotSrc *eventq.Source
	rearmed := false
	_, err := lp.AddTimer(100*time.Microsecond, 100*time.Microsecond, func(s *eventq.Source, n uint64) error {
		if n == 0 {
			t.Error("timer called with 0 expirations")
		}
		periodic += n
		if periodic >= 20 && !rearmed {
			// The one-shot fired once and stayed quiet; re-arm it.
			rearmed = true
			if oneShot != 1 {
				t.Errorf("one-shot timer fired %d times", oneShot)
			}
			return oneShotSrc.SetTimer(0, 0)
		}
		if periodic >= 40 && oneShot == 2 {
			lp.Stop()
			return s.Remove() // removing itself from its callback
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	oneShotSrc, err = lp.AddTimer(0, 0, func(*eventq.Source, uint64) error {
		oneShot++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if oneShot != 2 || periodic < 40 {
		t.Fatalf("one-shot fired %d times, periodic %d expirations", oneShot, periodic)
	}
	if _, err := lp.AddTimer(-1, 0, func(*eventq.Source, uint64) error { return nil }); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("negative timer: %v", err)
	}
}

func TestLoopFdSources(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	r, w := pipe(t)
	calls := 0
	src, err := lp.AddFd(r, eventq.In, func(s *eventq.Source, fd int, ev eventq.Events) error {
		calls++
		if fd != r || ev&eventq.In == 0 {
			t.Errorf("fd callback: fd %d, events %#x", fd, ev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runOnce := func(timeout time.Duration) int {
		t.Helper()
		n, err := lp.RunOnce(timeout)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := runOnce(0); n != 0 {
		t.Fatalf("nothing to read, %d callbacks", n)
	}
	syscall.Write(w, []byte("x"))
	// Level-triggered: reported while unread.
	if runOnce(-1) != 1 || runOnce(0) != 1 || calls != 2 {
		t.Fatalf("level: %d calls", calls)
	}
	// Edge-triggered: once per change.
	if err := src.SetEvents(eventq.In | eventq.Edge); err != nil {
		t.Fatal(err)
	}
	runOnce(0) // the re-registration may report the current level once
	before := calls
	if runOnce(0) != 0 {
		t.Fatal("edge-triggered source reported twice without a change")
	}
	syscall.Write(w, []byte("y"))
	if runOnce(-1) != 1 || calls != before+1 {
		t.Fatal("edge-triggered source missed a change")
	}
	// Disabled: not reported; OneShot: once until re-enabled.
	src.SetEvents(eventq.In)
	src.SetEnabled(false)
	if runOnce(0) != 0 {
		t.Fatal("disabled source ran")
	}
	src.SetEvents(eventq.In | eventq.OneShot)
	src.SetEnabled(true)
	if runOnce(0) != 1 || runOnce(0) != 0 {
		t.Fatal("one-shot")
	}
	src.SetEnabled(true)
	if runOnce(0) != 1 {
		t.Fatal("re-armed one-shot")
	}
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}
	if runOnce(0) != 0 {
		t.Fatal("removed source ran")
	}
	if _, err := lp.AddFd(-1, eventq.In, func(*eventq.Source, int, eventq.Events) error { return nil }); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("AddFd(-1): %v", err)
	}
	if _, err := lp.AddFd(r, 0, func(*eventq.Source, int, eventq.Events) error { return nil }); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("AddFd without events: %v", err)
	}
}

// D8: a source removed by another callback of the same iteration does not
// run, even though its event was already fetched.
func TestLoopRemoveOtherInSameBatch(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	r1, w1 := pipe(t)
	r2, w2 := pipe(t)
	var a, b *eventq.Source
	ran := map[string]int{}
	var err error
	var buf [1]byte
	a, err = lp.AddFd(r1, eventq.In, func(_ *eventq.Source, fd int, _ eventq.Events) error {
		ran["a"]++
		syscall.Read(fd, buf[:])
		return b.Remove()
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err = lp.AddFd(r2, eventq.In, func(_ *eventq.Source, fd int, _ eventq.Events) error {
		ran["b"]++
		syscall.Read(fd, buf[:])
		return a.Remove()
	})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Write(w1, []byte("1"))
	syscall.Write(w2, []byte("2"))
	// Both fds are ready before the loop waits: one epoll batch.
	n, err := lp.RunOnce(-1)
	if err != nil || n != 1 || ran["a"]+ran["b"] != 1 {
		t.Fatalf("RunOnce: %d callbacks (%v), ran %v", n, err, ran)
	}
	// The survivor drained its pipe; the removed one never runs although
	// its pipe is still readable.
	if n, _ := lp.RunOnce(0); n != 0 {
		t.Fatalf("%d callbacks after the removal", n)
	}
}

// Remove from another goroutine while the loop runs: once Remove returns,
// the callback never runs again.
func TestLoopRemoveFromAnotherGoroutine(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	c := newChan(t, eventq.WithCapacity(16))
	var removed, lateCalls, calls atomic.Int64
	first := make(chan struct{})
	src, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, eof bool) error {
		if calls.Add(1) == 1 {
			close(first)
		}
		if removed.Load() != 0 {
			lateCalls.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error)
	go func() { runErr <- lp.Run() }()
	stopSending := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-stopSending:
				return
			default:
			}
			c.TrySend([]byte("m"))
		}
	}()
	<-first
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}
	removed.Store(1)
	close(stopSending)
	<-sent
	// One more iteration after the removal, then stop.
	lp.Post(func() { lp.Stop() })
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if lateCalls.Load() != 0 {
		t.Fatalf("%d callbacks after Remove returned", lateCalls.Load())
	}
}

// A panic in a callback is recovered: the source is disabled, Run stops
// and returns it; the loop stays usable.
func TestLoopPanicRecovered(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	c := newChan(t)
	delivered := 0
	src, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, eof bool) error {
		delivered++
		if string(msg) == "boom" {
			panic("boom")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.TrySend([]byte("ok"))
	c.TrySend([]byte("boom"))
	c.TrySend([]byte("after"))
	err = lp.Run()
	var perr *eventq.PanicError
	if !errors.As(err, &perr) || perr.Value != "boom" || len(perr.Stack) == 0 {
		t.Fatalf("Run: %v", err)
	}
	if !errors.Is(err, syscall.ENOTRECOVERABLE) {
		t.Fatalf("PanicError does not wrap ENOTRECOVERABLE: %v", err)
	}
	if !errors.As(src.Err(), &perr) {
		t.Fatalf("source error: %v", src.Err())
	}
	// The source is disabled: "after" stays queued (nothing lost).
	if n, _ := lp.RunOnce(0); n != 0 || delivered != 2 {
		t.Fatalf("disabled source: %d callbacks, %d delivered", n, delivered)
	}
	if m, err := c.TryRecv(); err != nil || string(m) != "after" {
		t.Fatalf("message after the panic: %q %v", m, err)
	}
	// A panicking post, with an error value, through RunOnce.
	boom := errors.New("post boom")
	lp.Post(func() { panic(boom) })
	if _, err := lp.RunOnce(-1); !errors.Is(err, boom) {
		t.Fatalf("RunOnce after a panicking post: %v", err)
	}
	// The loop goes on.
	lp.Post(func() { lp.Stop() })
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
}

// A callback's error disables its source only; Err reports it.
func TestLoopCallbackError(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	failing, err := lp.AddTimer(0, 50*time.Microsecond, func(*eventq.Source, uint64) error {
		return syscall.EIO
	})
	if err != nil {
		t.Fatal(err)
	}
	ticks := 0
	lp.AddTimer(0, 50*time.Microsecond, func(s *eventq.Source, n uint64) error {
		if ticks++; ticks == 10 {
			lp.Stop()
		}
		return nil
	})
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(failing.Err(), syscall.EIO) {
		t.Fatalf("failing source: %v", failing.Err())
	}
}

func TestLoopBusy(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	var inner error
	lp.Post(func() {
		_, inner = lp.RunOnce(0)
		lp.Stop()
	})
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, eventq.ErrBusy) || !errors.Is(inner, syscall.EBUSY) {
		t.Fatalf("RunOnce from a callback: %v", inner)
	}
}

func TestLoopSignal(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	var got syscall.Signal
	src, err := lp.AddSignal(syscall.SIGUSR1, func(s *eventq.Source, sig syscall.Signal) error {
		got = sig
		return lp.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if got != syscall.SIGUSR1 {
		t.Fatalf("got signal %v", got)
	}
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}
}

// The loop embedded in Go's netpoller: its fd is polled there, and
// RunOnce(0) dispatches when it is readable; no thread waits in epoll.
func TestLoopEmbeddedInNetpoller(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	c := newChan(t)
	const n = 1000
	tr := newTracker(1, n)
	v := tr.consumer()
	eof := false
	if _, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, end bool) error {
		if end {
			eof = true
			return nil
		}
		v.add(msg)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(lp.Fd())
	if err != nil {
		t.Fatal(err)
	}
	// The header says every library fd is O_NONBLOCK, but the loop's epoll
	// fd is not (reported), and os.NewFile only polls non-blocking fds.
	// O_NONBLOCK is on the shared open file description; epoll_wait
	// ignores it, so the loop itself is unaffected.
	syscall.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "eventq-loop")
	defer f.Close()
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		t.Skipf("loop fd not pollable by the netpoller: %v", err)
	}
	go func() {
		for seq := uint64(0); seq < n; seq++ {
			c.Send(context.Background(), makeMsg(0, seq))
		}
		c.Close()
	}()
	rc, _ := f.SyscallConn()
	var runErr error
	err = rc.Read(func(uintptr) bool {
		for {
			k, err := lp.RunOnce(0)
			if err != nil {
				runErr = err
				return true
			}
			if eof {
				return true
			}
			if k == 0 {
				return false
			}
		}
	})
	if err != nil || runErr != nil {
		t.Fatal(err, runErr)
	}
	tr.verify(t)
	totalMessages.Add(n)
}

// Sources and posts from many goroutines at once, under -race.
func TestLoopConcurrentAdds(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	var mu sync.Mutex
	count := 0
	runErr := make(chan error)
	go func() { runErr <- lp.Run() }()
	goN(16, func(i int) {
		c, err := eventq.NewChan()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Release()
		done := make(chan struct{})
		src, err := lp.AddChan(c, func(s *eventq.Source, msg []byte, eof bool) error {
			if eof {
				err := s.Remove()
				close(done)
				return err
			}
			mu.Lock()
			count++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Error(err)
			return
		}
		for j := 0; j < 100; j++ {
			c.Send(context.Background(), []byte{byte(j)})
			lp.Post(func() {})
		}
		c.Close()
		<-done
		if err := src.Remove(); !errors.Is(err, eventq.ErrRemoved) {
			t.Errorf("Remove after the callback removed it: %v", err)
		}
	})
	lp.Stop()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if count != 16*100 {
		t.Fatalf("%d messages dispatched", count)
	}
	totalMessages.Add(16 * 100)
}
