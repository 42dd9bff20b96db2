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
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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
	if err := run(dir, bytes, time.Duration(stallUs)*time.Microsecond); err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string, bytes uint64, stall time.Duration) error {
	cg, err := eventq.OpenCgroup(dir)
	if err != nil {
		return err
	}
	defer cg.Close()
	lp, err := eventq.NewLoop()
	if err != nil {
		return err
	}
	defer lp.Close()

	live := 0 // sources that end with a removal
	onEvent := func(src *eventq.Source, ev *eventq.MemcgEvent) error {
		switch ev.Kind {
		case eventq.MemThreshold:
			dir := "below"
			if ev.Usage >= ev.Threshold {
				dir = "above"
			}
			fmt.Printf("%s threshold %d crossed %dx: usage %.1f MiB, now %s\n",
				stamp(), ev.Threshold, ev.Count, mib(ev.Usage), dir)
		case eventq.MemOOM:
			under := 0
			if ev.UnderOOM {
				under = 1
			}
			fmt.Printf("%s OOM %dx: under_oom %d, oom_kill %d\n", stamp(), ev.Count, under, ev.OOMKill)
		case eventq.MemPressure:
			fmt.Printf("%s pressure %s %dx\n", stamp(), ev.Level, ev.Count)
		case eventq.MemPSI:
			kind := "some"
			if ev.PSI.Full {
				kind = "full"
			}
			fmt.Printf("%s PSI %s %dus in %dus window (%s)\n", stamp(), kind,
				ev.PSI.Stall.Microseconds(), ev.PSI.Window.Microseconds(), ev.Spec)
		case eventq.MemChanged:
			var b strings.Builder
			for _, d := range ev.Deltas {
				fmt.Fprintf(&b, " %s %+d (%d)", d.Name, d.Delta, d.Value)
			}
			fmt.Printf("%s memory.events:%s\n", stamp(), b.String())
		case eventq.MemRemoved:
			fmt.Printf("%s cgroup removed (%s)\n", stamp(), ev.Spec)
			if live--; live == 0 {
				lp.Stop()
			}
		}
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if _, err := lp.AddSignal(sig, func(*eventq.Source, syscall.Signal) error {
			fmt.Printf("%s signal %d: exiting\n", stamp(), sig)
			return lp.Stop()
		}); err != nil {
			return err
		}
	}
	// add adds the watch a constructor returned (with its error).
	add := func(w *eventq.MemcgWatch, err error) error {
		if err == nil {
			_, err = lp.AddMemcg(w, onEvent)
		}
		return err
	}
	psi := eventq.PSITrigger{Stall: stall, Window: 2 * time.Second}
	if cg.V1Dir() != "" {
		if err := add(eventq.WatchThreshold(cg, bytes)); err != nil {
			return err
		}
		if err := add(eventq.WatchOOM(cg)); err != nil {
			return err
		}
		live += 2
		if err := add(eventq.WatchPressureLevel(cg, eventq.PressureCritical, eventq.ModeDefault)); err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		} else {
			live++
		}
		// System-wide: a v1 cgroup has no PSI file of its own. It never
		// reports a removal, so it is not counted in live.
		if err := add(eventq.WatchPSI(nil, psi)); err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		}
		fmt.Printf("memwatch: %s (cgroup v1): threshold %d bytes, OOM, pressure critical, PSI some %dus/2s system-wide\n",
			dir, bytes, stall.Microseconds())
	} else {
		var what []string
		if err := add(eventq.WatchPSI(cg, psi)); err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		} else {
			live++
			what = append(what, fmt.Sprintf("PSI some %dus/2s", stall.Microseconds()))
		}
		if err := add(eventq.WatchMemoryEvents(cg)); err != nil {
			fmt.Fprintf(os.Stderr, "memwatch: %v\n", err)
		} else {
			live++
			what = append(what, "memory.events")
		}
		if live == 0 {
			return fmt.Errorf("%s: nothing to watch", dir)
		}
		fmt.Printf("memwatch: %s (cgroup2): %s (byte thresholds need cgroup v1: %d ignored)\n",
			dir, strings.Join(what, ", "), bytes)
	}
	return lp.Run()
}
