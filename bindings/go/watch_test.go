// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Memory watches without a Loop: MemcgWatch.Next and Events, waiting in
// the netpoller. The real tests move a child process into new child
// cgroups (as memcg_test.go does) and assert each event with its count:
// the v1 threshold, OOM and removal; a PSI trigger read through the
// netpoller (whose poll takes the kernel's firing flag) next to an idle
// trigger on the same cgroup file, which the kernel wakes too and which
// must report nothing; cgroup.events deltas handed out to concurrent Next
// callers. Also: ctx cancellation, Close while goroutines wait (at
// GOMAXPROCS 1, 2, 4 and 16), ownership against Loop.AddMemcg, and no
// goroutine or fd left behind. Where cgroups are not writable the tests
// skip with the reason. No sleeps: every wait is on an event, with
// memcgHangGuard only as a hang guard.

// fdCount is the number of this process's open fds.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// checkWatchLeaks checks at cleanup that every pump goroutine ended and
// that the fds are as many as now.
func checkWatchLeaks(t *testing.T) {
	t.Helper()
	pumps, fds := eventq.LiveMemcgPumps(), fdCount(t)
	t.Cleanup(func() {
		if n := eventq.LiveMemcgPumps(); n != pumps {
			t.Errorf("memcg pump goroutines: %d live after the test, %d before", n, pumps)
		}
		if n := fdCount(t); n != fds {
			t.Errorf("fds: %d open after the test, %d before", n, fds)
		}
	})
}

// ownDirs returns the process's v1 memory and cgroup2 directories.
func ownDirs(t *testing.T) (v1, v2 string) {
	t.Helper()
	own, err := eventq.OwnCgroup()
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	defer own.Close()
	return own.V1Dir(), own.V2Dir()
}

// hangGuard is a context that only turns a lost notification into a
// failure.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), memcgHangGuard)
	t.Cleanup(cancel)
	return ctx
}

// next is Next with the hang guard, failing the test on an error.
func next(t *testing.T, w *eventq.MemcgWatch, what string) *eventq.MemcgEvent {
	t.Helper()
	ev, err := w.Next(hangGuard(t))
	if err != nil {
		t.Fatalf("%s: Next: %v", what, err)
	}
	return ev
}

// openDir opens the cgroup at dir.
func openDir(t *testing.T, dir string) *eventq.Cgroup {
	t.Helper()
	cg, err := eventq.OpenCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	return cg
}

// The cgroup v1 test without a loop: the threshold and OOM watches, each
// waited on with Next.
func TestWatchNextV1(t *testing.T) {
	checkWatchLeaks(t)
	v1, _ := ownDirs(t)
	if v1 == "" {
		t.Skip("the cgroup v1 memory controller is not mounted")
	}
	dir, err := childCgroup(t, v1)
	if err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v (needs root or a delegated cgroup)", v1, err)
	}
	const mib = 1 << 20
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("41943040"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	cg := openDir(t, dir)
	const threshold = 16 * mib
	th, err := eventq.WatchThreshold(cg, threshold)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	oom, err := eventq.WatchOOM(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer oom.Close()

	h := startHog(t)
	defer h.kill()
	pid := h.expect(t, "HOG ready")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(h.in, "alloc 24")
	h.expect(t, "HOG at")

	// One crossing of 16 MiB, counted once.
	if ev := next(t, th, "threshold"); ev.Kind != eventq.MemThreshold || ev.Count != 1 ||
		ev.Threshold != threshold || ev.Usage < threshold || ev.Spec == "" {
		t.Fatalf("threshold event %+v, want one crossing up", ev)
	}
	// Into the limit: one OOM, the child waiting in the kernel's OOM handling.
	fmt.Fprintln(h.in, "alloc 64")
	if ev := next(t, oom, "OOM"); ev.Kind != eventq.MemOOM || ev.Count != 1 || !ev.UnderOOM {
		t.Fatalf("OOM event %+v, want one OOM under_oom", ev)
	}
	// Killed: one crossing down.
	h.kill()
	if ev := next(t, th, "threshold"); ev.Kind != eventq.MemThreshold || ev.Count != 1 || ev.Usage >= threshold {
		t.Fatalf("threshold event %+v, want one crossing down", ev)
	}
	// Removal: MemRemoved, then ErrWatchEnded, for each.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*eventq.MemcgWatch{th, oom} {
		if ev := next(t, w, "removal"); ev.Kind != eventq.MemRemoved {
			t.Fatalf("event %+v, want MemRemoved", ev)
		}
		if _, err := w.Next(context.Background()); !errors.Is(err, eventq.ErrWatchEnded) ||
			!errors.Is(err, syscall.ENOENT) {
			t.Errorf("Next after MemRemoved: %v, want ErrWatchEnded", err)
		}
	}
}

// A PSI trigger through the netpoller: its poll takes the kernel's firing
// flag, and the firing is read from its report. An idle trigger on the
// same cgroup file, whose pollers the kernel wakes when the other fires,
// reports nothing: its first event is its removal.
func TestWatchPSINetpoller(t *testing.T) {
	checkWatchLeaks(t)
	v1, v2 := ownDirs(t)
	if v1 == "" || v2 == "" {
		t.Skip("needs both the cgroup v1 memory controller (for a limit) and cgroup2 (for PSI)")
	}
	d1, err := childCgroup(t, v1)
	if err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v", v1, err)
	}
	d2, err := childCgroup(t, v2)
	if err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v", v2, err)
	}
	if err := os.WriteFile(filepath.Join(d1, "memory.limit_in_bytes"), []byte("41943040"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d1, "memory.oom_control"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	cg := openDir(t, d2)
	low := eventq.PSITrigger{Stall: time.Microsecond, Window: 2 * time.Second}
	fires, err := eventq.WatchPSI(cg, low)
	if err != nil {
		t.Skipf("PSI trigger on %s: %v", d2, err)
	}
	defer fires.Close()
	// A full stall of 10 s in a 10 s window: nothing here comes near it.
	never := eventq.PSITrigger{Full: true, Stall: 10 * time.Second, Window: 10 * time.Second}
	idle, err := eventq.WatchPSI(cg, never)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	// The idle watch waits in the netpoller from the start.
	idleEvents := make(chan *eventq.MemcgEvent, 4)
	go func() {
		events, _ := idle.Events(context.Background())
		for ev := range events {
			idleEvents <- ev
		}
		close(idleEvents)
	}()

	h := startHog(t)
	defer h.kill()
	pid := h.expect(t, "HOG ready")
	for _, d := range []string{d1, d2} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(pid), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Into the v1 limit: reclaim stalls the child, in the cgroup2 child
	// too; the trigger fires at the kernel's next 2 s update.
	fmt.Fprintln(h.in, "alloc 64")
	ev := next(t, fires, "PSI")
	if ev.Kind != eventq.MemPSI || ev.Count != 1 || ev.PSI != low ||
		ev.Spec != filepath.Join(d2, "memory.pressure")+":some 1 2000000" {
		t.Fatalf("PSI event %+v, want the firing of %v", ev, low)
	}
	h.kill()
	if err := os.Remove(d2); err != nil {
		t.Fatal(err)
	}
	// Each watch's next event is its removal: no second firing of the
	// first was invented, and the idle one reported nothing before.
	for {
		ev := next(t, fires, "removal")
		if ev.Kind == eventq.MemRemoved {
			break
		}
		if ev.Kind != eventq.MemPSI { // a second firing before the rmdir is possible
			t.Fatalf("event %+v, want MemPSI or MemRemoved", ev)
		}
	}
	if ev := <-idleEvents; ev == nil || ev.Kind != eventq.MemRemoved {
		t.Fatalf("the idle trigger's first event: %+v, want MemRemoved", ev)
	}
	if ev, ok := <-idleEvents; ok {
		t.Fatalf("after MemRemoved: %+v", ev)
	}
}

// cgroup.events deltas handed out to concurrent Next callers: a child
// moved into the cgroup gives populated +1, killed -1; each change once,
// to one caller. The removal goes to one caller; all then see
// ErrWatchEnded.
func TestWatchConcurrentNext(t *testing.T) {
	checkWatchLeaks(t)
	_, v2 := ownDirs(t)
	if v2 == "" {
		t.Skip("cgroup2 is not mounted")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 4, 16} {
		runtime.GOMAXPROCS(procs)
		dir, err := childCgroup(t, v2)
		if err != nil {
			t.Skipf("cannot create a child cgroup in %s: %v", v2, err)
		}
		w, err := eventq.WatchCounters(openDir(t, dir), "cgroup.events")
		if err != nil {
			t.Fatal(err)
		}
		ctx := hangGuard(t)
		got := make(chan *eventq.MemcgEvent, 16)
		errs := make(chan error, 16)
		const consumers = 8
		for range consumers {
			go func() {
				for {
					ev, err := w.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					got <- ev
				}
			}()
		}
		populated := func() int64 {
			ev := <-got
			if ev.Kind != eventq.MemChanged || len(ev.Deltas) != 1 || ev.Deltas[0].Name != "populated" {
				t.Fatalf("GOMAXPROCS=%d: event %+v, want a populated delta", procs, ev)
			}
			return ev.Deltas[0].Delta
		}
		for round := range 3 {
			h := startHog(t)
			pid := h.expect(t, "HOG ready")
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
				t.Fatal(err)
			}
			if d := populated(); d != 1 {
				t.Fatalf("GOMAXPROCS=%d round %d: populated %+d, want +1", procs, round, d)
			}
			h.kill()
			if d := populated(); d != -1 {
				t.Fatalf("GOMAXPROCS=%d round %d: populated %+d, want -1", procs, round, d)
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if ev := <-got; ev.Kind != eventq.MemRemoved {
			t.Fatalf("GOMAXPROCS=%d: event %+v, want MemRemoved", procs, ev)
		}
		for range consumers {
			if err := <-errs; !errors.Is(err, eventq.ErrWatchEnded) {
				t.Fatalf("GOMAXPROCS=%d: a consumer ended with %v, want ErrWatchEnded", procs, err)
			}
		}
		select {
		case ev := <-got:
			t.Fatalf("GOMAXPROCS=%d: an event after the removal: %+v", procs, ev)
		default:
		}
		w.Close()
	}
}

// idleWatch is a watch that reports nothing until the test acts: a
// cgroup2 child's cgroup.events (removed at cleanup), or else a
// system-wide PSI trigger that cannot fire.
func idleWatch(t *testing.T) (w *eventq.MemcgWatch, dir string) {
	t.Helper()
	if _, v2 := ownDirs(t); v2 != "" {
		if dir, err := childCgroup(t, v2); err == nil {
			w, err := eventq.WatchCounters(openDir(t, dir), "cgroup.events")
			if err != nil {
				t.Fatal(err)
			}
			return w, dir
		}
	}
	w, err := eventq.WatchPSI(nil, eventq.PSITrigger{Full: true, Stall: 10 * time.Second, Window: 10 * time.Second})
	if err != nil {
		t.Skipf("no idle watch here (no writable cgroup2, no PSI): %v", err)
	}
	return w, ""
}

// Next with a ctx cancelled while it waits returns ctx.Err(), and the
// watch goes on: the next Next gets the next event.
func TestWatchNextCancel(t *testing.T) {
	checkWatchLeaks(t)
	w, dir := idleWatch(t)
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := w.Next(ctx)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with ctx cancelled: %v, want context.Canceled", err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a done ctx and nothing there: %v, want context.Canceled", err)
	}
	if dir == "" {
		return
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	events, errf := w.Events(hangGuard(t))
	var got []eventq.MemcgKind
	for ev := range events {
		got = append(got, ev.Kind)
	}
	if err := errf(); err != nil || len(got) != 1 || got[0] != eventq.MemRemoved {
		t.Fatalf("Events after the cancel: %v, %v; want [removed], nil", got, err)
	}
}

// Close while goroutines wait in Next and range over Events: each wakes
// with ErrWatchClosed; the pump goroutine and every fd are gone when Close
// returns. At GOMAXPROCS 1, 2, 4 and 16.
func TestWatchCloseWhileWaiting(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 4, 16} {
		runtime.GOMAXPROCS(procs)
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			pumps, fds := eventq.LiveMemcgPumps(), fdCount(t)
			w, _ := idleWatch(t)
			waiters := 4 * procs
			var started sync.WaitGroup
			errs := make(chan error, waiters+1)
			started.Add(waiters + 1)
			for range waiters {
				go func() {
					started.Done()
					_, err := w.Next(context.Background())
					errs <- err
				}()
			}
			go func() {
				events, errf := w.Events(context.Background())
				started.Done()
				for ev := range events {
					t.Errorf("an event of an idle watch: %+v", ev)
				}
				errs <- errf()
			}()
			started.Wait()
			// Whether each waiter has parked by now or not, Close ends
			// its wait: the result is the same.
			w.Close()
			if n := eventq.LiveMemcgPumps(); n != pumps {
				t.Errorf("pump goroutines: %d live after Close, %d before", n, pumps)
			}
			for range waiters + 1 {
				if err := <-errs; !errors.Is(err, eventq.ErrWatchClosed) || !errors.Is(err, syscall.EBADF) {
					t.Errorf("a waiter woke with %v, want ErrWatchClosed", err)
				}
			}
			if _, err := w.Next(context.Background()); !errors.Is(err, eventq.ErrWatchClosed) {
				t.Errorf("Next after Close: %v, want ErrWatchClosed", err)
			}
			w.Close() // again: nothing
			if n := fdCount(t); n != fds {
				t.Errorf("fds: %d after Close, %d before", n, fds)
			}
		})
	}
}

// One or the other: a watch that Next started cannot be added to a loop,
// one a loop took cannot be waited on, and a closed one neither; many
// watches started and closed leave nothing behind.
func TestWatchOwnership(t *testing.T) {
	checkHandles(t)
	checkWatchLeaks(t)
	var nilWatch *eventq.MemcgWatch
	if _, err := nilWatch.Next(context.Background()); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Next on a nil watch: %v, want EINVAL", err)
	}
	lp := newLoop(t)
	noop := func(*eventq.Source, *eventq.MemcgEvent) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	w, _ := idleWatch(t)
	if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v", err)
	}
	if _, err := lp.AddMemcg(w, noop); !errors.Is(err, eventq.ErrWatchUsed) {
		t.Errorf("AddMemcg after Next: %v, want ErrWatchUsed", err)
	}
	w.Close()

	w, _ = idleWatch(t)
	src, err := lp.AddMemcg(w, noop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, eventq.ErrWatchUsed) {
		t.Errorf("Next after AddMemcg: %v, want ErrWatchUsed", err)
	}
	w.Close() // the source owns it: nothing
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}

	w, _ = idleWatch(t)
	w.Close()
	if _, err := w.Next(ctx); !errors.Is(err, eventq.ErrWatchClosed) {
		t.Errorf("Next after Close: %v, want ErrWatchClosed", err)
	}

	// Many at once, started and closed.
	var ws []*eventq.MemcgWatch
	for range 50 {
		w, _ := idleWatch(t)
		if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next: %v", err)
		}
		ws = append(ws, w)
	}
	if n := eventq.LiveMemcgPumps(); n < 50 {
		t.Errorf("%d pump goroutines for 50 started watches", n)
	}
	for _, w := range ws {
		w.Close()
	}
}
