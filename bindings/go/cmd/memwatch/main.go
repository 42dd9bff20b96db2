// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

// Command memwatch is a tiny kubelet eviction watcher on libeventq's
// memory watches, the Go twin of examples-c/memwatch.c.
//
//	memwatch <cgroup dir> <bytes> [psi stall us]
//
// On a cgroup v1 memory directory it watches the usage threshold <bytes>
// (kubelet's threshold notifier), OOM, memory.pressure_level "critical"
// and a system-wide PSI trigger; on a cgroup2 directory, a PSI trigger on
// the cgroup's memory.pressure and its memory.events counters (byte
// thresholds are a cgroup v1 interface). The PSI trigger is "some <stall
// us> 2000000" (default stall 100000 us). Each event is printed with a
// timestamp and the kernel's count, so none is merged away. It runs until
// SIGINT/SIGTERM, or until the cgroup is removed.
//
// It needs no event loop: each watch is ranged over (MemcgWatch.Events) by
// a goroutine of its own, which waits in Go's netpoller.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

func stamp() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func main() {
	if len(os.Args) < 3 || len(os.Args) > 4 {
		fmt.Fprintf(os.Stderr, "usage: %s <cgroup dir> <bytes> [psi stall us]\n", os.Args[0])
		os.Exit(2)
	}
	dir := os.Args[1]
	bytes, err := strconv.ParseUint(os.Args[2], 0, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: <bytes> must be a number: %s\n", os.Args[2])
		os.Exit(2)
	}
	stallUs := uint64(100000)
	if len(os.Args) == 4 {
		if stallUs, err = strconv.ParseUint(os.Args[3], 0, 64); err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: [psi stall us] must be a number: %s\n", os.Args[3])
			os.Exit(2)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Printf("%s signal %d: exiting\n", stamp(), sig)
		cancel()
	}()
	if err := run(ctx, os.Stdout, dir, bytes, time.Duration(stallUs)*time.Microsecond); err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		os.Exit(1)
	}
}

// describe is one event as examples-c/memwatch.c prints it (without the
// stamp).
func describe(ev *eventq.MemcgEvent) string {
	switch ev.Kind {
	case eventq.MemThreshold:
		dir := "below"
		if ev.Usage >= ev.Threshold {
			dir = "above"
		}
		return fmt.Sprintf("threshold %d crossed %dx: usage %.1f MiB, now %s",
			ev.Threshold, ev.Count, mib(ev.Usage), dir)
	case eventq.MemOOM:
		under := 0
		if ev.UnderOOM {
			under = 1
		}
		return fmt.Sprintf("OOM %dx: under_oom %d, oom_kill %d", ev.Count, under, ev.OOMKill)
	case eventq.MemPressure:
		return fmt.Sprintf("pressure %s %dx", ev.Level, ev.Count)
	case eventq.MemPSI:
		kind := "some"
		if ev.PSI.Full {
			kind = "full"
		}
		return fmt.Sprintf("PSI %s %dus in %dus window (%s)", kind,
			ev.PSI.Stall.Microseconds(), ev.PSI.Window.Microseconds(), ev.Spec)
	case eventq.MemChanged:
		var b strings.Builder
		for _, d := range ev.Deltas {
			fmt.Fprintf(&b, " %s %+d (%d)", d.Name, d.Delta, d.Value)
		}
		return "memory.events:" + b.String()
	case eventq.MemRemoved:
		return fmt.Sprintf("cgroup removed (%s)", ev.Spec)
	}
	return fmt.Sprintf("%v (%s)", ev.Kind, ev.Spec)
}

// run watches dir until every watch that ends with the cgroup's removal
// ended, or ctx is done; the events go to out.
func run(ctx context.Context, out io.Writer, dir string, bytes uint64, stall time.Duration) error {
	cg, err := eventq.OpenCgroup(dir)
	if err != nil {
		return err
	}
	defer cg.Close()

	var ending, others []*eventq.MemcgWatch // ending: those that report a removal
	defer func() {
		for _, w := range append(ending, others...) {
			w.Close()
		}
	}()
	// keep adds the watch a constructor returned (or says why there is none).
	keep := func(to *[]*eventq.MemcgWatch, w *eventq.MemcgWatch, err error) error {
		if err == nil {
			*to = append(*to, w)
		}
		return err
	}
	warn := func(err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		}
	}
	psi := eventq.PSITrigger{Stall: stall, Window: 2 * time.Second}
	if cg.V1Dir() != "" {
		w, err := eventq.WatchThreshold(cg, bytes)
		if err := keep(&ending, w, err); err != nil {
			return err
		}
		w, err = eventq.WatchOOM(cg)
		if err := keep(&ending, w, err); err != nil {
			return err
		}
		w, err = eventq.WatchPressureLevel(cg, eventq.PressureCritical, eventq.ModeDefault)
		warn(keep(&ending, w, err))
		// System-wide: a v1 cgroup has no PSI file of its own. It never
		// reports a removal, so it does not keep the program running.
		w, err = eventq.WatchPSI(nil, psi)
		warn(keep(&others, w, err))
		fmt.Fprintf(out, "memwatch: %s (cgroup v1): threshold %d bytes, OOM, pressure critical, PSI some %dus/2s system-wide\n",
			dir, bytes, stall.Microseconds())
	} else {
		var what []string
		w, err := eventq.WatchPSI(cg, psi)
		if err := keep(&ending, w, err); err != nil {
			warn(err)
		} else {
			what = append(what, fmt.Sprintf("PSI some %dus/2s", stall.Microseconds()))
		}
		w, err = eventq.WatchMemoryEvents(cg)
		if err := keep(&ending, w, err); err != nil {
			warn(err)
		} else {
			what = append(what, "memory.events")
		}
		if len(ending) == 0 {
			return fmt.Errorf("%s: nothing to watch", dir)
		}
		fmt.Fprintf(out, "memwatch: %s (cgroup2): %s (byte thresholds need cgroup v1: %d ignored)\n",
			dir, strings.Join(what, ", "), bytes)
	}

	// One goroutine per watch, each ranging over its events; the others
	// stop once every ending watch ended.
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex // one line at a time to out
	var failed error
	pump := func(w *eventq.MemcgWatch) {
		events, errf := w.Events(watchCtx)
		for ev := range events {
			mu.Lock()
			fmt.Fprintf(out, "%s %s\n", stamp(), describe(ev))
			mu.Unlock()
		}
		if err := errf(); err != nil && !errors.Is(err, context.Canceled) {
			mu.Lock()
			failed = errors.Join(failed, err)
			mu.Unlock()
			stop()
		}
	}
	var endings, all sync.WaitGroup
	for _, w := range ending {
		endings.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			defer endings.Done()
			pump(w)
		}()
	}
	for _, w := range others {
		all.Add(1)
		go func() {
			defer all.Done()
			pump(w)
		}()
	}
	endings.Wait()
	stop()
	all.Wait()
	return failed
}
