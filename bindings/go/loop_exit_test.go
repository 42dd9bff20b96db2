// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Close inside a callback: once it returns, no callback runs. The channel
// source has 9 more messages queued (they stay in the channel), another
// channel source is ready with 10, and 3 posts are queued (discarded, their
// handles deleted: checkHandles). Through Run and through RunOnce.
func TestLoopCloseInCallback(t *testing.T) {
	for _, once := range []bool{false, true} {
		name := "Run"
		if once {
			name = "RunOnce"
		}
		t.Run(name, func(t *testing.T) {
			checkHandles(t)
			lp, err := eventq.NewLoop()
			if err != nil {
				t.Fatal(err)
			}
			a, b := newChan(t), newChan(t)
			for i := 0; i < 10; i++ {
				a.TrySend([]byte{'a', byte(i)})
				b.TrySend([]byte{'b', byte(i)})
			}
			closed := false // touched by callbacks only: one goroutine at a time
			calls, late := 0, 0
			cb := func(*eventq.Source, []byte, bool) error {
				calls++
				if closed {
					late++
					return nil
				}
				if err := lp.Close(); err != nil {
					t.Errorf("Close in a callback: %v", err)
				}
				closed = true
				return nil
			}
			srcA, err := lp.AddChan(a, cb)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lp.AddChan(b, cb); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if err := lp.Post(func() { cb(nil, nil, false) }); err != nil {
					t.Fatal(err)
				}
			}
			if once {
				n, err := lp.RunOnce(0)
				if n != 1 || err != nil {
					t.Fatalf("RunOnce: %d, %v", n, err)
				}
			} else if err := lp.Run(); err != nil {
				t.Fatal(err)
			}
			if calls != 1 || late != 0 {
				t.Fatalf("%d callbacks, %d after Close returned", calls, late)
			}
			// The loop is gone; what the callbacks did not take stays queued.
			sa, _ := a.Stats()
			sb, _ := b.Stats()
			if sa.Pending+sb.Pending != 19 {
				t.Fatalf("pending %d + %d, want 19", sa.Pending, sb.Pending)
			}
			if err := srcA.SetEnabled(true); !errors.Is(err, eventq.ErrRemoved) {
				t.Fatalf("source of the closed loop: %v", err)
			}
			if err := lp.Run(); !errors.Is(err, eventq.ErrLoopClosed) {
				t.Fatalf("Run after Close: %v", err)
			}
			if err := lp.Close(); !errors.Is(err, eventq.ErrLoopClosed) {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// Close from another goroutine while a callback runs: it waits for the run
// to end, and no callback runs after it returned.
func TestLoopCloseWaitsForRun(t *testing.T) {
	checkHandles(t)
	lp, err := eventq.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	c := newChan(t)
	for i := 0; i < 5; i++ {
		c.TrySend([]byte{byte(i)})
	}
	inCallback := make(chan struct{})
	release := make(chan struct{})
	var closeReturned atomic.Bool
	var calls, late atomic.Int64
	if _, err := lp.AddChan(c, func(*eventq.Source, []byte, bool) error {
		if closeReturned.Load() {
			late.Add(1)
		}
		if calls.Add(1) == 1 {
			close(inCallback)
			<-release
			if closeReturned.Load() {
				t.Error("Close returned while a callback ran")
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	eventq.SetCloseWaitHook(func() { close(waiting) })
	defer eventq.SetCloseWaitHook(nil)
	runErr := make(chan error, 1)
	go func() { runErr <- lp.Run() }()
	<-inCallback
	closeErr := make(chan error, 1)
	go func() {
		err := lp.Close()
		closeReturned.Store(true)
		closeErr <- err
	}()
	<-waiting // Close stopped the loop and waits for the run
	close(release)
	if err := <-closeErr; err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 || late.Load() != 0 {
		t.Fatalf("%d callbacks, %d after Close returned", calls.Load(), late.Load())
	}
	if st, _ := c.Stats(); st.Pending != 4 {
		t.Fatalf("pending %d, want 4", st.Pending)
	}
}

// runtime.Goexit in a callback ends the goroutine that runs the loop, as a
// direct call would: the callback's and the goroutine's deferred calls
// run, Run does not return, no other callback runs, the source is disabled
// with ErrGoexit, and the loop is usable afterwards.
func TestLoopGoexitInCallback(t *testing.T) {
	for _, once := range []bool{false, true} {
		name := "Run"
		if once {
			name = "RunOnce"
		}
		t.Run(name, func(t *testing.T) {
			checkHandles(t)
			lp := newLoop(t)
			c := newChan(t)
			for i := 0; i < 10; i++ {
				c.TrySend([]byte{byte(i)})
			}
			var calls, posts, cbDefer int
			src, err := lp.AddChan(c, func(_ *eventq.Source, msg []byte, _ bool) error {
				calls++
				if msg[0] == 2 {
					defer func() { cbDefer++ }()
					runtime.Goexit()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			lp.Post(func() { posts++ })
			returned, deferred := false, false
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { deferred = true }()
				if once {
					lp.RunOnce(0)
				} else {
					lp.Run()
				}
				returned = true
			}()
			<-done
			if returned || !deferred || cbDefer != 1 {
				t.Fatalf("Run returned %v, its goroutine's defers ran %v, the callback's %d", returned, deferred, cbDefer)
			}
			if calls != 3 || posts != 0 {
				t.Fatalf("%d callbacks and %d posts ran, want 3 and none after the Goexit", calls, posts)
			}
			if err := src.Err(); !errors.Is(err, eventq.ErrGoexit) || !errors.Is(err, syscall.ECANCELED) {
				t.Fatalf("source error: %v", err)
			}
			// Usable: the post runs, the disabled source does not until
			// re-enabled, then it delivers the rest, from this goroutine.
			if n, err := lp.RunOnce(0); n != 1 || err != nil || posts != 1 {
				t.Fatalf("RunOnce after the Goexit: %d %v, %d posts", n, err, posts)
			}
			if err := src.SetEnabled(true); err != nil {
				t.Fatal(err)
			}
			for calls < 10 {
				if _, err := lp.RunOnce(-1); err != nil {
					t.Fatal(err)
				}
			}
			if calls != 10 {
				t.Fatalf("%d messages delivered in all, want 10", calls)
			}
		})
	}
}

// t.SkipNow in a callback (runtime.Goexit, the way t.FailNow ends a test)
// ends the subtest that runs the loop; the loop is fine after it.
func TestLoopSkipNowInCallback(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	ran := false
	t.Run("skipped", func(t *testing.T) {
		lp.Post(func() { t.SkipNow() })
		lp.Run()
		ran = true
	})
	if ran {
		t.Fatal("the subtest went on after SkipNow in a callback")
	}
	lp.Post(func() { lp.Stop() })
	if err := lp.Run(); err != nil {
		t.Fatalf("Run after: %v", err)
	}
}

// A Goexit in a callback of a loop run from a callback of another loop
// ends both runs, innermost first; both loops stay usable.
func TestLoopGoexitNested(t *testing.T) {
	checkHandles(t)
	outer, inner := newLoop(t), newLoop(t)
	outerDeferRan, outerAfter := false, false
	inner.Post(func() { runtime.Goexit() })
	outer.Post(func() {
		defer func() { outerDeferRan = true }()
		inner.RunOnce(0)
		outerAfter = true
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		outer.Run()
		t.Error("Run returned")
	}()
	<-done
	if !outerDeferRan || outerAfter {
		t.Fatalf("the outer callback's defer ran %v, it went on %v", outerDeferRan, outerAfter)
	}
	for _, lp := range []*eventq.Loop{inner, outer} {
		lp.Post(func() { lp.Stop() })
		if err := lp.Run(); err != nil {
			t.Fatal(err)
		}
	}
}

// PostWait waits for room instead of failing: posts from 64 goroutines at
// GOMAXPROCS 16, far more than the queue holds, each run exactly once and
// in each goroutine's order.
func TestPostWaitManyGoroutines(t *testing.T) {
	checkHandles(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	const posters, per = 64, 1000 // 64,000 posts, the queue holds 4,096
	lp := newLoop(t)
	var waits atomic.Int64
	eventq.SetPostWaitHook(func() { waits.Add(1) })
	defer eventq.SetPostWaitHook(nil)
	ran := make([][]int, posters) // touched by the loop only
	runErr := make(chan error, 1)
	go func() { runErr <- lp.Run() }()
	goN(posters, func(p int) {
		for i := 0; i < per; i++ {
			if err := lp.PostWait(context.Background(), func() { ran[p] = append(ran[p], i) }); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if err := lp.PostWait(context.Background(), func() { lp.Stop() }); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	for p := range ran {
		if len(ran[p]) != per {
			t.Fatalf("poster %d: %d posts ran, want %d", p, len(ran[p]), per)
		}
		for i, v := range ran[p] {
			if v != i {
				t.Fatalf("poster %d: post %d ran as number %d", p, v, i)
			}
		}
	}
	t.Logf("%d posts, PostWait waited %d times", posters*per, waits.Load())
}

// PostWait on a full queue: it waits until the loop takes posts, ends on
// ctx or Close without the post running, and does not wait in a callback.
func TestPostWaitFullQueue(t *testing.T) {
	checkHandles(t)
	lp := newLoop(t)
	if err := lp.PostWait(context.Background(), nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil fn: %v", err)
	}
	// From a callback, on a full queue: ErrWouldBlock, no wait. An fd ready
	// before the posts are queued comes first in the loop's first batch.
	r, w := pipe(t)
	syscall.Write(w, []byte("x"))
	var inCallback error
	if _, err := lp.AddFd(r, eventq.In, func(s *eventq.Source, _ int, _ eventq.Events) error {
		inCallback = lp.PostWait(context.Background(), func() {})
		return s.Remove()
	}); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for {
		err := lp.Post(func() { ran++ })
		if errors.Is(err, eventq.ErrWouldBlock) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	waiting := make(chan struct{}, 16)
	eventq.SetPostWaitHook(func() { waiting <- struct{}{} })
	defer eventq.SetPostWaitHook(nil)

	// Cancelled while waiting: the post never runs.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	cancelledRan := false
	go func() { errc <- lp.PostWait(ctx, func() { cancelledRan = true }) }()
	<-waiting
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled PostWait: %v", err)
	}

	// Waiters are let in as the loop takes posts.
	const waiters = 8
	var wg sync.WaitGroup
	var waited atomic.Int64
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := lp.PostWait(context.Background(), func() { waited.Add(1) }); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := 0; i < waiters; i++ {
		<-waiting
	}
	for waited.Load() < waiters {
		if _, err := lp.RunOnce(-1); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if !errors.Is(inCallback, eventq.ErrWouldBlock) {
		t.Fatalf("PostWait in a callback on a full queue: %v", inCallback)
	}
	if ran < 4096 || cancelledRan {
		t.Fatalf("%d queued posts ran (want all), the cancelled one ran: %v", ran, cancelledRan)
	}

	// Close while waiting: ErrLoopClosed, the post never runs.
	for lp.Post(func() {}) == nil {
	}
	go func() { errc <- lp.PostWait(context.Background(), func() { cancelledRan = true }) }()
	<-waiting
	lp.Close()
	if err := <-errc; !errors.Is(err, eventq.ErrLoopClosed) || cancelledRan {
		t.Fatalf("PostWait woken by Close: %v (ran %v)", err, cancelledRan)
	}
	if err := lp.PostWait(context.Background(), func() {}); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("PostWait after Close: %v", err)
	}
	if err := lp.Post(func() {}); !errors.Is(err, eventq.ErrLoopClosed) {
		t.Fatalf("Post after Close: %v", err)
	}
}
