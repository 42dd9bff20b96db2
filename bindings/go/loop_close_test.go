// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Close from the goroutine that a running callback waits for: it gives up
// the wait after the loop's close wait and says so (ErrWouldDeadlock,
// EDEADLK) instead of hanging; the loop is closed all the same, no
// callback starts after it, and it is freed once the callback returns.
func TestLoopCloseWouldDeadlockWaitingCallback(t *testing.T) {
	checkHandles(t)
	lp, err := eventq.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	lp.SetCloseWait(20 * time.Millisecond)
	release := make(chan struct{}) // closed by this goroutine, after Close
	inCallback := make(chan struct{})
	var calls atomic.Int64
	lp.Post(func() {
		calls.Add(1)
		close(inCallback)
		<-release
	})
	lp.Post(func() { calls.Add(1) })
	runErr := make(chan error, 1)
	go func() { runErr <- lp.Run() }()
	<-inCallback
	err = lp.Close()
	if !errors.Is(err, eventq.ErrWouldDeadlock) || !errors.Is(err, syscall.EDEADLK) {
		t.Fatalf("Close while a callback waits for its caller: %v", err)
	}
	close(release)
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d callbacks ran, want 1 (none after Close)", calls.Load())
	}
	if posts, _ := lp.Dropped(); posts != 1 {
		t.Fatalf("Dropped: %d posts, want 1", posts)
	}
	if err := lp.Close(); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// A cycle through the package's own waits is refused at once: loop A's
// callback waits in B's Source.Remove for B's running callback, which
// calls A.Close. Close returns ErrWouldDeadlock without waiting (the close
// wait is an hour: a wait would time the test out); then both go on.
func TestLoopCloseWouldDeadlockCycle(t *testing.T) {
	checkHandles(t)
	a, err := eventq.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	a.SetCloseWait(time.Hour)
	b := newLoop(t)
	bIn, aWaiting := make(chan struct{}), make(chan struct{})
	var once sync.Once
	eventq.SetWaitHook(func() { once.Do(func() { close(aWaiting) }) })
	defer eventq.SetWaitHook(nil)

	c := newChan(t)
	c.TrySend([]byte("x"))
	closeErr := make(chan error, 1)
	srcB, err := b.AddChan(c, func(*eventq.Source, []byte, bool) error {
		close(bIn)
		<-aWaiting // A's callback waits for this one
		closeErr <- a.Close()
		return b.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	removeErr := make(chan error, 1)
	a.Post(func() {
		<-bIn
		removeErr <- srcB.Remove() // waits for srcB's running callback
	})
	runA, runB := make(chan error, 1), make(chan error, 1)
	go func() { runA <- a.Run() }()
	go func() { runB <- b.Run() }()
	if err := <-closeErr; !errors.Is(err, eventq.ErrWouldDeadlock) {
		t.Fatalf("Close closing a cycle of waits: %v", err)
	}
	if err := <-removeErr; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := <-runA; err != nil {
		t.Fatalf("A's Run: %v", err)
	}
	if err := <-runB; err != nil {
		t.Fatalf("B's Run: %v", err)
	}
	if err := a.Post(func() {}); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("A is closed: Post gives %v", err)
	}
}

// Every accepted post runs or is counted as dropped: posters (Post and
// PostWait) race a Close from another goroutine while the loop runs, at
// GOMAXPROCS 1, 2, 4 and 16; accepted == ran + dropped, exactly.
func TestLoopPostsRacingClose(t *testing.T) {
	for _, procs := range []int{1, 2, 4, 16} {
		t.Run(fmt.Sprint("GOMAXPROCS=", procs), func(t *testing.T) {
			checkHandles(t)
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for round := 0; round < 5; round++ {
				postsRacingClose(t)
			}
		})
	}
}

func postsRacingClose(t *testing.T) {
	lp, err := eventq.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	const posters = 8
	var accepted, ran atomic.Int64
	enough := make(chan struct{}) // some posts ran: time to close
	var enoughOnce sync.Once
	post := func() {
		if ran.Add(1) == 500 {
			enoughOnce.Do(func() { close(enough) })
		}
	}
	runErr := make(chan error, 1)
	go func() { runErr <- lp.Run() }()
	var wg sync.WaitGroup
	for p := 0; p < posters; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var err error
				if p%2 == 0 {
					err = lp.Post(post)
				} else {
					err = lp.PostWait(context.Background(), post)
				}
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, eventq.ErrWouldBlock):
					runtime.Gosched()
				case errors.Is(err, eventq.ErrLoopClosed):
					return
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	<-enough
	if err := lp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	dropped, _ := lp.Dropped()
	if a, r := accepted.Load(), ran.Load(); a != r+int64(dropped) {
		t.Fatalf("accepted %d posts, %d ran, %d reported dropped: %d unaccounted for", a, r, dropped, a-r-int64(dropped))
	}
}

// openFds counts the process's open fds.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Loops whose callbacks refer to the loop (the end-of-stream callback
// calls lp.Stop) are freed when dropped without Close: their fds are
// closed and their handles deleted once the GC found them unreachable.
func TestLoopDroppedWithSelfReferenceIsFreed(t *testing.T) {
	const loops = 50
	// Only this test's loops count: loops other tests dropped may be freed
	// meanwhile (which can only lower the counts below).
	freed := make(chan struct{}, loops)
	var mine sync.Map
	eventq.SetLoopFreedHook(func(id uintptr) {
		if _, ok := mine.Load(id); ok {
			select {
			case freed <- struct{}{}:
			default: // never block the cleanup goroutine
			}
		}
	})
	defer eventq.SetLoopFreedHook(nil)
	runtime.GC()
	fds0, handles0 := openFds(t), eventq.LiveHandles()
	func() {
		for i := 0; i < loops; i++ {
			lp, err := eventq.NewLoop()
			if err != nil {
				t.Fatal(err)
			}
			mine.Store(eventq.LoopID(lp), true)
			c, err := eventq.NewChan()
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			if _, err := lp.AddChan(c, func(_ *eventq.Source, _ []byte, eof bool) error {
				if eof {
					return lp.Stop() // the idiom: the callback refers to the loop
				}
				got++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			c.TrySend([]byte("m"))
			c.Close()
			if err := lp.Run(); err != nil || got != 1 {
				t.Fatalf("Run: %v, %d messages", err, got)
			}
			c.Release()
			// lp is dropped here, without Close.
		}
	}()
	// The watchdog only fails a hang; the GC is asked again while the
	// cleanups are not all in (a channel a freed loop's source held goes
	// at a later collection).
	watchdog := time.NewTimer(60 * time.Second)
	defer watchdog.Stop()
	nudge := time.NewTicker(100 * time.Millisecond)
	defer nudge.Stop()
	runtime.GC()
	n := 0
	for n < loops || openFds(t) > fds0 || eventq.LiveHandles() > handles0 {
		select {
		case <-freed:
			n++
		case <-nudge.C:
			runtime.GC()
		case <-watchdog.C:
			ents, _ := os.ReadDir("/proc/self/fd")
			var what []string
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				what = append(what, e.Name()+"->"+l)
			}
			t.Fatalf("%d of %d dropped loops freed; %d fds open, %d before (%v); %d cgo handles live, %d before",
				n, loops, openFds(t), fds0, what, eventq.LiveHandles(), handles0)
		}
	}
}

// AddChanBatch: one callback per batch, in order, at most the budget; end
// of stream once; a Close in a batch callback leaves the later messages in
// the channel (every message taken was delivered).
func TestLoopChanBatch(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	c := newChan(t)
	var got [][]byte
	var sizes []int
	eofs := 0
	src, err := lp.AddChanBatch(c, func(_ *eventq.Source, msgs [][]byte, eof bool) error {
		if eof {
			eofs++
			return lp.Stop()
		}
		sizes = append(sizes, len(msgs))
		got = append(got, msgs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.SetBudget(7); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		c.TrySend([]byte{byte(i)})
	}
	c.Close()
	if err := lp.Run(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 30 || eofs != 1 {
		t.Fatalf("%d messages, %d ends of stream", len(got), eofs)
	}
	for i, m := range got {
		if len(m) != 1 || m[0] != byte(i) {
			t.Fatalf("message %d: %v", i, m)
		}
	}
	for _, n := range sizes {
		if n > 7 {
			t.Fatalf("batches %v above the budget 7", sizes)
		}
	}

	lp2, _ := eventq.NewLoop()
	c2 := newChan(t)
	if _, err := lp2.AddChanBatch(c2, func(_ *eventq.Source, msgs [][]byte, _ bool) error {
		return lp2.Close()
	}); err != nil {
		t.Fatal(err)
	}
	lp2Src, _ := lp2.AddChanBatch(newChan(t), func(*eventq.Source, [][]byte, bool) error { return nil })
	_ = lp2Src
	for i := 0; i < 10; i++ {
		c2.TrySend([]byte{byte(i)})
	}
	if n, err := lp2.RunOnce(0); n != 1 || err != nil {
		t.Fatalf("RunOnce: %d %v", n, err)
	}
	if st, _ := c2.Stats(); st.Pending != 0 {
		t.Fatalf("pending %d: the batch (all 10) was delivered", st.Pending)
	}
	if _, msgs := lp2.Dropped(); msgs != 0 {
		t.Fatalf("%d messages dropped", msgs)
	}
}

// A callback may leave its goroutine's OS thread locked (no pairing
// rule): the loop goes on, and its other callbacks run.
func TestLoopUnpairedLockOSThread(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	ran := 0
	lp.Post(func() { runtime.LockOSThread(); runtime.LockOSThread(); ran++ })
	lp.Post(func() { runtime.UnlockOSThread(); ran++ })
	lp.Post(func() { ran++; lp.Stop() })
	done := make(chan error)
	go func() { done <- lp.Run() }() // the goroutine exits locked: its thread ends
	if err := <-done; err != nil || ran != 3 {
		t.Fatalf("Run: %v, %d posts ran", err, ran)
	}
}
