// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Memory pressure without a loop: one call starts the watch, and Next
// waits for each event in Go's netpoller (no OS thread blocks) until
// Ctrl-C ends the context. (These examples depend on the machine's
// cgroups, so they are compiled, not run.)
func ExampleWatchPSI() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	// 150 ms of memory stall within any 2 s window, system-wide (nil); a
	// cgroup's own: eventq.WatchPSI(cg, trigger).
	trigger := eventq.PSITrigger{Stall: 150 * time.Millisecond, Window: 2 * time.Second}
	w, err := eventq.WatchPSI(nil, trigger)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		log.Fatal("this kernel has no PSI: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	for {
		ev, err := w.Next(ctx)
		if err != nil {
			log.Print(err) // context.Canceled on Ctrl-C
			return
		}
		fmt.Printf("%s memory pressure: %v\n", time.Now().Format(time.TimeOnly), ev.PSI)
	}
}

// A kubelet-style eviction threshold on a cgroup v1 memory cgroup, its
// events ranged over until the cgroup is removed: MemRemoved is the last
// one, and then the range ends with errf() == nil.
func ExampleMemcgWatch_Events() {
	cg, err := eventq.OpenCgroup("/sys/fs/cgroup/memory/job")
	if err != nil {
		log.Fatal(err) // errors.Is(err, syscall.ENOENT): no such cgroup
	}
	w, err := eventq.WatchThreshold(cg, 512<<20)
	cg.Close() // the watch does not need it
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	events, errf := w.Events(context.Background())
	for ev := range events {
		switch ev.Kind {
		case eventq.MemThreshold:
			fmt.Printf("512 MiB crossed %d time(s), usage now %d bytes\n", ev.Count, ev.Usage)
		case eventq.MemRemoved:
			fmt.Println("the cgroup was removed")
		}
	}
	if err := errf(); err != nil {
		log.Fatal(err)
	}
}

// Several watches, each waited on by a goroutine of its own; closing a
// watch wakes its goroutine with ErrWatchClosed.
func ExampleMemcgWatch_Close() {
	cg, err := eventq.OwnCgroup()
	if err != nil {
		log.Fatal(err)
	}
	defer cg.Close()
	w, err := eventq.WatchMemoryEvents(cg) // cgroup2: memory.events
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := w.Next(context.Background())
			if errors.Is(err, eventq.ErrWatchClosed) {
				return // closed below
			} else if err != nil {
				log.Print(err)
				return
			}
			for _, d := range ev.Deltas {
				fmt.Printf("%s %+d (now %d)\n", d.Name, d.Delta, d.Value)
			}
		}
	}()
	// ... later:
	w.Close()
	<-done
}
