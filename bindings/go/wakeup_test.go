// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Lost wake-ups. A goroutine waiting in Send or Recv polls a dup of the
// channel's fd in Go's netpoller, which is edge-triggered (EPOLLET): it
// wakes on an eventfd write only, not on the fd being readable. These tests
// run both sides through the netpoller at every GOMAXPROCS from 1 to 16,
// in many short rounds; a wake-up the library fails to write leaves a
// round hung, and the watchdog turns that into a failure with the
// goroutines' stacks. No timing is checked otherwise.

// wakeupGOMAXPROCS are the settings every wake-up test runs at.
var wakeupGOMAXPROCS = []int{1, 2, 4, 8, 16}

// roundDeadline is the watchdog: a round still running after it is hung
// (a round takes well under a second even under -race on 2 cores).
const roundDeadline = 30 * time.Second

type wakeupConfig struct {
	capacity, producers, per, consumers int
	batch                               int // consumers use RecvBatch(batch) if > 0, else Recv
}

// runWakeupRounds runs rounds rounds of cfg at each GOMAXPROCS setting and
// restores the setting afterwards.
func runWakeupRounds(t *testing.T, cfg wakeupConfig, rounds int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range wakeupGOMAXPROCS {
		runtime.GOMAXPROCS(procs)
		start := time.Now()
		for r := 0; r < rounds; r++ {
			if !wakeupRound(t, cfg, fmt.Sprintf("GOMAXPROCS=%d round %d/%d", procs, r+1, rounds)) {
				t.FailNow()
			}
		}
		t.Logf("GOMAXPROCS=%d: %d rounds in %v", procs, rounds, time.Since(start).Round(time.Millisecond))
	}
	totalMessages.Add(int64(len(wakeupGOMAXPROCS) * rounds * cfg.producers * cfg.per))
}

// wakeupRound sends producers*per messages through a new channel while
// consumers receive until end of stream; the channel is closed after the
// last send. It checks D1-D3 and reports false if the round failed.
func wakeupRound(t *testing.T, cfg wakeupConfig, name string) bool {
	t.Helper()
	c, err := eventq.NewChan(eventq.WithCapacity(cfg.capacity))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// The watchdog cancels ctx: every wait ends then, so a hung round
	// still returns and releases its goroutines.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTracker(cfg.producers, uint64(cfg.per))
	errs := make(chan error, cfg.producers+cfg.consumers)
	done := make(chan struct{})
	go func() {
		defer close(done)
		recvDone := make(chan struct{})
		go func() {
			defer close(recvDone)
			goN(cfg.consumers, func(int) { errs <- consume(ctx, c, tr.consumer(), cfg.batch) })
		}()
		goN(cfg.producers, func(p int) {
			for seq := uint64(0); seq < uint64(cfg.per); seq++ {
				if err := c.Send(ctx, makeMsg(uint32(p), seq)); err != nil {
					errs <- fmt.Errorf("producer %d, message %d: %w", p, seq, err)
					return
				}
			}
		})
		c.Close()
		<-recvDone
	}()
	watchdog := time.NewTimer(roundDeadline)
	defer watchdog.Stop()
	select {
	case <-done:
	case <-watchdog.C:
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		st, _ := c.Stats()
		t.Errorf("%s: hung for %v (lost wake-up?); %d of %d messages received; stats %+v; goroutines:\n%s",
			name, roundDeadline, tr.received.Load(), cfg.producers*cfg.per, st, buf)
		cancel()
		<-done
		return false
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	tr.verify(t)
	return !t.Failed()
}

// consume receives into v until end of stream (nil) or another error.
func consume(ctx context.Context, c *eventq.Chan, v *consumer, batch int) error {
	for {
		if batch > 0 {
			msgs, err := c.RecvBatch(ctx, batch)
			if errors.Is(err, eventq.ErrClosed) {
				return nil
			} else if err != nil {
				return fmt.Errorf("consumer: %w", err)
			}
			for _, m := range msgs {
				v.add(m)
			}
			continue
		}
		m, err := c.Recv(ctx)
		if errors.Is(err, eventq.ErrClosed) {
			return nil
		} else if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		v.add(m)
	}
}

// Receivers parked in the netpoller on an emptying channel: 8 producers
// send 2,000 messages each into a 64-slot channel, 4 consumers Recv until
// end of stream. 16 rounds at each of the 5 GOMAXPROCS settings: 80
// rounds, 1,280,000 messages (about 5 s under -race on 2 quiet cores).
func TestWakeupRecvSide(t *testing.T) {
	runWakeupRounds(t, wakeupConfig{capacity: 64, producers: 8, per: 2000, consumers: 4}, 16)
}

// The mirror: producers parked in Send on a 4-slot channel (low water 2)
// while consumers drain it in batches. 16 producers send 400 messages each,
// 2 consumers RecvBatch up to 4 at a time. 10 rounds at each setting: 50
// rounds, 320,000 messages (about 6 s under -race on 2 quiet cores).
func TestWakeupSendSide(t *testing.T) {
	runWakeupRounds(t, wakeupConfig{capacity: 4, producers: 16, per: 400, consumers: 2, batch: 4}, 10)
}
