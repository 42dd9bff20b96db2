// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// The memory-pressure watches through the Go binding: errors that say what
// is missing, watch ownership, and the real cgroup v1 test (where the memory controller is
// writable): a child process moved into a new child cgroup allocates past
// a threshold, then into its limit; the threshold, OOM and removal
// notifications are asserted with their counts. Where cgroups are not
// writable the tests skip with the reason.

// memcgHangGuard only turns a lost notification into a failure.
const memcgHangGuard = 60 * time.Second

// TestMemcgHogHelper is not a test: it is the allocating child of
// TestMemcgV1, active only with EVENTQ_MEMCG_HOG set. "alloc <MiB>"
// touches memory up to that total and answers "HOG at <MiB>". The memory
// is mmap'd, outside the Go heap, so neither the GC nor the race
// detector's shadow memory changes what is charged to the cgroup; and it
// is mapped whole before the child joins the cgroup, so every charge
// after that is a page fault. A charge in a syscall (mmap's own kernel
// memory) at the limit fails with ENOMEM instead of entering the OOM
// wait: the child would exit and the OOM notification never come.
func TestMemcgHogHelper(t *testing.T) {
	if os.Getenv("EVENTQ_MEMCG_HOG") == "" {
		return
	}
	const maxMiB = 128
	region, err := syscall.Mmap(-1, 0, maxMiB<<20, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		fmt.Fprintf(os.Stderr, "allocating child: mmap %d MiB: %v\n", maxMiB, err)
		os.Exit(3)
	}
	touched := 0 // bytes
	fmt.Printf("HOG ready %d\n", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		mib, ok := strings.CutPrefix(in.Text(), "alloc ")
		if !ok {
			continue
		}
		want, _ := strconv.Atoi(mib)
		for ; touched < min(want, maxMiB)<<20; touched += 4096 {
			region[touched] = 1
		}
		fmt.Printf("HOG at %d\n", touched>>20)
	}
	os.Exit(0)
}

var memcgSeq atomic.Int64

// childCgroup makes a new child cgroup of parent, removed at cleanup if
// still there. Tests kill their allocating child (deferred) before the
// cleanup runs, so the cgroup is empty by then.
func childCgroup(t *testing.T, parent string) (string, error) {
	dir := filepath.Join(parent, fmt.Sprintf("eventq-test-%d-go%d", os.Getpid(), memcgSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir, nil
}

// addMemcg adds the watch a constructor returned (with its error).
func addMemcg(lp *eventq.Loop, w *eventq.MemcgWatch, err error, fn eventq.MemcgFunc) (*eventq.Source, error) {
	if err != nil {
		return nil, err
	}
	return lp.AddMemcg(w, fn)
}

func TestMemcgErrors(t *testing.T) {
	checkHandles(t)
	_, err := eventq.OpenCgroup("/nonexistent/eventq")
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no such cgroup") ||
		!strings.Contains(err.Error(), "/nonexistent/eventq") {
		t.Fatalf("OpenCgroup(nonexistent) = %v, want an error wrapping ENOENT that names it", err)
	}
	if _, err := eventq.OpenCgroup(os.TempDir()); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("OpenCgroup(a plain directory) = %v, want ENOENT", err)
	}

	lp := newLoop(t)
	noop := func(*eventq.Source, *eventq.MemcgEvent) error { return nil }
	for _, tr := range []eventq.PSITrigger{
		{Stall: 100 * time.Millisecond, Window: 400 * time.Millisecond},
		{Stall: 100 * time.Millisecond, Window: 12 * time.Second},
		{Full: true, Stall: 0, Window: 2 * time.Second},
		{Stall: 3 * time.Second, Window: 2 * time.Second},
	} {
		if _, err := eventq.WatchPSI(nil, tr); !errors.Is(err, syscall.EINVAL) ||
			!strings.Contains(err.Error(), "PSI trigger") {
			t.Errorf("WatchPSI(%v) = %v, want EINVAL", tr, err)
		}
	}
	if _, err := eventq.WatchOOM(nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("WatchOOM(nil) = %v, want EINVAL", err)
	}
	if _, err := lp.AddMemcg(nil, noop); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AddMemcg(nil) = %v, want EINVAL", err)
	}

	// AddMemcg takes the watch over, also when it fails.
	if _, statErr := os.Stat("/proc/pressure/memory"); statErr == nil {
		tr := eventq.PSITrigger{Stall: 150 * time.Millisecond, Window: 2 * time.Second}
		w, err := eventq.WatchPSI(nil, tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lp.AddMemcg(w, nil); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("nil callback: %v, want EINVAL", err)
		}
		if _, err := lp.AddMemcg(w, noop); !errors.Is(err, eventq.ErrWatchUsed) {
			t.Errorf("a watch added twice: %v, want ErrWatchUsed", err)
		}
		w.Close() // nothing left to free
		if w, err = eventq.WatchPSI(nil, tr); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if _, err := lp.AddMemcg(w, noop); !errors.Is(err, eventq.ErrWatchUsed) {
			t.Errorf("a closed watch: %v, want ErrWatchUsed", err)
		}
		closed, err := eventq.NewLoop()
		if err != nil {
			t.Fatal(err)
		}
		closed.Close()
		if w, err = eventq.WatchPSI(nil, tr); err != nil {
			t.Fatal(err)
		}
		if _, err := closed.AddMemcg(w, noop); !errors.Is(err, eventq.ErrLoopClosed) {
			t.Errorf("a closed loop: %v, want ErrLoopClosed", err)
		}
	}

	own, err := eventq.OwnCgroup()
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	defer own.Close()
	if v2 := own.V2Dir(); v2 != "" {
		cg, err := eventq.OpenCgroup(v2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eventq.WatchThreshold(cg, 1); !errors.Is(err, syscall.ENODEV) ||
			!strings.Contains(err.Error(), "memory threshold: memory controller or interface not available") {
			t.Errorf("threshold on a cgroup2 cgroup: %v, want ENODEV", err)
		}
		if _, err := eventq.WatchOOM(cg); !errors.Is(err, syscall.ENODEV) {
			t.Errorf("OOM on a cgroup2 cgroup: %v, want ENODEV", err)
		}
		cg.Close()
		cg.Close() // a second Close does nothing
		if _, err := eventq.WatchOOM(cg); !errors.Is(err, eventq.ErrCgroupClosed) ||
			!errors.Is(err, syscall.EBADF) {
			t.Errorf("closed cgroup: %v, want ErrCgroupClosed", err)
		}
		if cg.V2Dir() != "" {
			t.Errorf("V2Dir after Close = %q", cg.V2Dir())
		}
	}
	if v1 := own.V1Dir(); v1 != "" {
		cg, err := eventq.OpenCgroup(v1)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		if cg.V2Dir() != "" || cg.V1Dir() != v1 {
			t.Errorf("v1 cgroup dirs: %q %q", cg.V1Dir(), cg.V2Dir())
		}
		if _, err := eventq.WatchMemoryEvents(cg); !errors.Is(err, syscall.ENODEV) {
			t.Errorf("memory.events on a v1 cgroup: %v, want ENODEV", err)
		}
		if _, err := eventq.WatchCounters(cg, "a/b"); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("counters file a/b: %v, want EINVAL", err)
		}
	}

	// System-wide PSI: registered where the kernel has PSI.
	tr := eventq.PSITrigger{Stall: 150 * time.Millisecond, Window: 2 * time.Second}
	w, err := eventq.WatchPSI(nil, tr)
	src, err := addMemcg(lp, w, err, noop)
	if _, statErr := os.Stat("/proc/pressure/memory"); statErr != nil {
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Errorf("PSI without /proc/pressure: %v, want EOPNOTSUPP", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("system-wide PSI trigger %v: %v", tr, err)
	}
	if err := src.Remove(); err != nil {
		t.Fatal(err)
	}
}

// hog is the allocating child process.
type hog struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startHog(t *testing.T) *hog {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemcgHogHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EVENTQ_MEMCG_HOG=1")
	cmd.Stderr = os.Stderr // a child that fails says why
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &hog{cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	return h
}

// logCgroupOnFailure says, when t has failed, what the kernel shows of the
// cgroup and whether the allocating child still runs: what a lost
// notification needs to be told apart from a child that died.
func logCgroupOnFailure(t *testing.T, dir string, h *hog) {
	if !t.Failed() {
		return
	}
	for _, f := range []string{"memory.usage_in_bytes", "memory.failcnt", "memory.oom_control", "cgroup.procs"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		t.Logf("%s: %q %v", f, b, err)
	}
	// Z (zombie) is a child that exited; D or S one that waits.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "State:") {
			t.Logf("the allocating child: %s", l)
		}
	}
	if err != nil {
		t.Logf("the allocating child: %v", err)
	}
}

// expect returns what follows prefix in the child's next line that has it.
func (h *hog) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(memcgHangGuard)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("the allocating child exited before saying %q", prefix)
			}
			if i := strings.Index(line, prefix); i >= 0 {
				return strings.TrimSpace(line[i+len(prefix):])
			}
		case <-deadline:
			t.Fatalf("the allocating child said nothing within the hang guard")
		}
	}
}

func (h *hog) kill() {
	if h.cmd.Process != nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}

// runUntil runs the loop until done; the deadline is only a hang guard.
func runUntil(t *testing.T, lp *eventq.Loop, what string, done func() bool) {
	t.Helper()
	start := time.Now()
	for !done() {
		if time.Since(start) > memcgHangGuard {
			t.Fatalf("no %s within the hang guard", what)
		}
		if _, err := lp.RunOnce(500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMemcgV1(t *testing.T) {
	checkHandles(t)
	own, err := eventq.OwnCgroup()
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	parent := own.V1Dir()
	own.Close()
	if parent == "" {
		t.Skip("the cgroup v1 memory controller is not mounted")
	}
	dir, err := childCgroup(t, parent)
	if err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v (needs root or a delegated cgroup)", parent, err)
	}
	const mib = 1 << 20
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("41943040"), 0); err != nil {
		t.Fatal(err)
	}
	// The child then waits in the kernel's OOM handling instead of being
	// killed, so the OOM is observable (under_oom) until it is killed.
	if err := os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	cg, err := eventq.OpenCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()

	lp := newLoop(t)
	var events []eventq.MemcgEvent // only touched on this goroutine
	record := func(src *eventq.Source, ev *eventq.MemcgEvent) error {
		events = append(events, *ev)
		return nil
	}
	count := func(kind eventq.MemcgKind) (calls int, sum uint64) {
		for _, e := range events {
			if e.Kind == kind {
				calls++
				sum += e.Count
			}
		}
		return
	}
	const threshold = 16 * mib
	w, err := eventq.WatchThreshold(cg, threshold)
	if _, err := addMemcg(lp, w, err, record); err != nil {
		t.Fatal(err)
	}
	w, err = eventq.WatchOOM(cg)
	if _, err := addMemcg(lp, w, err, record); err != nil {
		t.Fatal(err)
	}

	h := startHog(t)
	defer h.kill()
	defer logCgroupOnFailure(t, dir, h)
	pid := h.expect(t, "HOG ready")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(h.in, "alloc 24")
	h.expect(t, "HOG at")

	// One crossing of 16 MiB, counted once.
	runUntil(t, lp, "threshold notification", func() bool { n, _ := count(eventq.MemThreshold); return n > 0 })
	if n, sum := count(eventq.MemThreshold); n != 1 || sum != 1 {
		t.Fatalf("threshold: %d calls, %d crossings; want 1, 1: %+v", n, sum, events)
	}
	if e := events[0]; e.Usage < threshold || e.Threshold != threshold || e.Spec == "" {
		t.Errorf("threshold event %+v", e)
	}

	// Into the limit: the child sleeps in the kernel's OOM wait.
	fmt.Fprintln(h.in, "alloc 64")
	runUntil(t, lp, "OOM notification", func() bool { n, _ := count(eventq.MemOOM); return n > 0 })
	// One OOM: the child's faulting thread sleeps in the OOM wait, and
	// nothing else in the cgroup allocates.
	if n, sum := count(eventq.MemOOM); n != 1 || sum != 1 {
		t.Errorf("OOM: %d calls, %d notifications; want 1, 1: %+v", n, sum, events)
	}
	for _, e := range events {
		if e.Kind == eventq.MemOOM && !e.UnderOOM {
			t.Errorf("OOM event %+v: want under_oom", e)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.oom_control")); !strings.Contains(string(b), "under_oom 1") {
		t.Errorf("memory.oom_control: %q, want under_oom 1", b)
	}

	// Killed: its memory is freed, one crossing down.
	h.kill()
	runUntil(t, lp, "threshold crossing down", func() bool { n, _ := count(eventq.MemThreshold); return n > 1 })
	if _, sum := count(eventq.MemThreshold); sum != 2 {
		t.Errorf("crossings: %d, want 2: %+v", sum, events)
	}
	for _, e := range events[1:] {
		if e.Kind == eventq.MemThreshold && e.Usage >= threshold {
			t.Errorf("crossing down with usage %d", e.Usage)
		}
	}

	// Removal ends both sources, once each.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	runUntil(t, lp, "removal notifications", func() bool { n, _ := count(eventq.MemRemoved); return n >= 2 })
	lp.RunOnce(0)
	if n, _ := count(eventq.MemRemoved); n != 2 {
		t.Errorf("removals: %d, want 2", n)
	}
	t.Logf("%d events: %+v", len(events), events)
}

// PSI and cgroup.events on a cgroup2 child cgroup; removing it ends both.
func TestMemcgV2Removal(t *testing.T) {
	checkHandles(t)
	own, err := eventq.OwnCgroup()
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	parent := own.V2Dir()
	own.Close()
	if parent == "" {
		t.Skip("cgroup2 is not mounted")
	}
	dir, err := childCgroup(t, parent)
	if err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v", parent, err)
	}
	cg, err := eventq.OpenCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	lp := newLoop(t)
	var removed []string
	record := func(src *eventq.Source, ev *eventq.MemcgEvent) error {
		if ev.Kind == eventq.MemRemoved {
			removed = append(removed, ev.Spec)
		}
		return nil
	}
	want := 1
	tr := eventq.PSITrigger{Stall: 100 * time.Millisecond, Window: 2 * time.Second}
	w, err := eventq.WatchPSI(cg, tr)
	if _, err := addMemcg(lp, w, err, record); err == nil {
		want++
	} else {
		t.Logf("PSI part skipped: %v", err)
	}
	w, err = eventq.WatchCounters(cg, "cgroup.events")
	if _, err := addMemcg(lp, w, err, record); err != nil {
		t.Fatal(err)
	}
	w, err = eventq.WatchMemoryEvents(cg)
	if _, err := addMemcg(lp, w, err, record); err != nil && !errors.Is(err, syscall.ENODEV) {
		t.Errorf("memory.events: %v, want success or ENODEV", err)
	} else if err == nil {
		want++
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	runUntil(t, lp, "removal notifications", func() bool { return len(removed) >= want })
	lp.RunOnce(0)
	if len(removed) != want {
		t.Errorf("removals %v, want %d", removed, want)
	}
}
