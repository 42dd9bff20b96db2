// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// memwatch's run on a real cgroup v1 child cgroup (where the memory
// controller is writable): a process that allocates 48 MiB in it and exits
// crosses a 32 MiB threshold up and down; the rmdir ends run, one removal
// line per watch that reports it. A cancelled context ends it too. No
// sleeps: lines are read as run writes them.

// hangGuard only turns a lost notification into a failure.
const hangGuard = 60 * time.Second

// TestHogHelper is not a test: it is the allocating child, active only
// with MEMWATCH_HOG set to a cgroup.procs path: it moves itself there,
// touches 48 MiB outside the Go heap, and exits.
func TestHogHelper(t *testing.T) {
	procs := os.Getenv("MEMWATCH_HOG")
	if procs == "" {
		return
	}
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		os.Exit(3)
	}
	m, err := syscall.Mmap(-1, 0, 48<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		os.Exit(4)
	}
	for i := 0; i < len(m); i += 4096 {
		m[i] = 1
	}
	os.Exit(0)
}

// v1Child makes a child of the process's v1 memory cgroup, or skips.
func v1Child(t *testing.T) string {
	own, err := eventq.OwnCgroup()
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	parent := own.V1Dir()
	own.Close()
	if parent == "" {
		t.Skip("the cgroup v1 memory controller is not mounted")
	}
	dir := filepath.Join(parent, fmt.Sprintf("eventq-test-%d-memwatch-%s", os.Getpid(), t.Name()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a child cgroup in %s: %v (needs root or a delegated cgroup)", parent, err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// start runs run in a goroutine; its lines come on the channel, its
// result on the other.
func start(ctx context.Context, dir string, bytes uint64) (<-chan string, <-chan error) {
	r, w := io.Pipe()
	lines, res := make(chan string, 64), make(chan error, 1)
	go func() {
		err := run(ctx, w, dir, bytes, time.Millisecond)
		w.Close()
		res <- err
	}()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines, res
}

func line(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("run ended")
		}
		return l
	case <-time.After(hangGuard):
		t.Fatal("no line within the hang guard")
	}
	return ""
}

func TestRunV1(t *testing.T) {
	dir := v1Child(t)
	const mib = 1 << 20
	lines, res := start(context.Background(), dir, 32*mib)
	if h := line(t, lines); !strings.HasPrefix(h, fmt.Sprintf("memwatch: %s (cgroup v1): threshold %d bytes, OOM", dir, 32*mib)) {
		t.Fatalf("header %q", h)
	}
	hog := exec.Command(os.Args[0], "-test.run=^TestHogHelper$", "-test.count=1")
	hog.Env = append(os.Environ(), "MEMWATCH_HOG="+filepath.Join(dir, "cgroup.procs"))
	if out, err := hog.CombinedOutput(); err != nil {
		t.Fatalf("the allocating child: %v: %s", err, out)
	}
	// Up, then down as it exits: two crossings, on one line or two.
	var crossings []string
	counted := 0
	for counted < 2 {
		l := line(t, lines)
		if _, rest, ok := strings.Cut(l, " crossed "); ok && strings.Contains(l, " threshold ") {
			n, err := strconv.Atoi(strings.SplitN(rest, "x", 2)[0])
			if err != nil {
				t.Fatalf("line %q", l)
			}
			crossings = append(crossings, l)
			counted += n
		}
	}
	if counted != 2 || !strings.HasSuffix(crossings[len(crossings)-1], "now below") {
		t.Fatalf("crossings %q", crossings)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	removed := 0
	for l := range lines {
		if strings.Contains(l, " cgroup removed (") {
			removed++
		}
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// Threshold, OOM and pressure level (the last where the kernel has it).
	if removed != 3 {
		t.Errorf("%d removal lines, want 3", removed)
	}
}

func TestRunCancel(t *testing.T) {
	dir := v1Child(t)
	ctx, cancel := context.WithCancel(context.Background())
	lines, res := start(ctx, dir, 1<<30)
	line(t, lines) // the header: every watch is made
	cancel()
	for range lines {
	}
	if err := <-res; err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	err := run(context.Background(), io.Discard, "/nonexistent/eventq", 1, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no such cgroup") {
		t.Fatalf("run on a missing cgroup: %v", err)
	}
}
