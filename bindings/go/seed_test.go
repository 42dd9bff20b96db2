// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if totalMessages.Load() > 0 {
		fmt.Printf("eventq tests pushed %d messages through, with %d goroutines and %d C threads\n",
			totalMessages.Load(), totalGoroutines.Load(), totalCThreads.Load())
	}
	os.Exit(code)
}

// The seed's three use cases (one client sending a request per interval,
// one client sending a burst, many clients at once), through the binding:
// a bare eventfd merged or lost messages in each; here every message must
// arrive exactly once, whole, in order.

// One sender, one message per tick; the consumer waits in the netpoller
// between messages (the channel is empty most of the time).
func TestSeedOneSenderPerInterval(t *testing.T) {
	const n = 300
	c := newChan(t)
	tr := newTracker(1, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		drain(context.Background(), t, c, tr.consumer())
	}()
	goN(1, func(int) {
		tick := time.NewTicker(50 * time.Microsecond) // paces the workload only
		defer tick.Stop()
		for seq := uint64(0); seq < n; seq++ {
			<-tick.C
			if err := c.Send(context.Background(), makeMsg(0, seq)); err != nil {
				t.Error(err)
				return
			}
		}
		c.Close()
	})
	<-done
	tr.verify(t)
	totalMessages.Add(n)
	st, _ := c.Stats()
	t.Logf("per interval: %d sent, %d received, %d receive doorbell rings", st.Sent, st.Received, st.RecvDoorbellRings)
}

// One sender, a burst far larger than the capacity: the sender waits in the
// netpoller on the send fd whenever the channel is full.
func TestSeedBurst(t *testing.T) {
	const n = 200_000 // the seed's burst
	c := newChan(t, eventq.WithCapacity(1024))
	tr := newTracker(1, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		drainBatches(context.Background(), t, c, tr.consumer(), 128)
	}()
	goN(1, func(int) {
		for seq := uint64(0); seq < n; seq++ {
			if err := c.Send(context.Background(), makeMsg(0, seq)); err != nil {
				t.Error(err)
				return
			}
		}
		c.Close()
	})
	<-done
	tr.verify(t)
	totalMessages.Add(n)
	st, _ := c.Stats()
	if st.PeakDepth > 1024 {
		t.Errorf("D5: peak depth %d above capacity 1024", st.PeakDepth)
	}
	t.Logf("burst: %d messages, peak depth %d, %d receive and %d send doorbell rings",
		st.Sent, st.PeakDepth, st.RecvDoorbellRings, st.SendDoorbellRings)
}

// Many clients at once: 64 producer goroutines using every send path, four
// consumers using every receive path, on a small channel so both sides wait.
func TestSeedManyClients(t *testing.T) {
	const producers, per = 64, 1000
	c := newChan(t, eventq.WithCapacity(64))
	tr := newTracker(producers, per)
	consumers := make(chan struct{})
	go func() {
		defer close(consumers)
		goN(4, func(i int) {
			v := tr.consumer()
			ctx := context.Background()
			switch i {
			case 0: // Recv
				for {
					m, err := c.Recv(ctx)
					if errors.Is(err, eventq.ErrClosed) {
						return
					} else if err != nil {
						t.Error(err)
						return
					}
					v.add(m)
				}
			case 1: // RecvInto, with a buffer that is sometimes too small
				buf := make([]byte, 40)
				for {
					n, err := c.RecvInto(ctx, buf)
					var small *eventq.BufferTooSmallError
					if errors.As(err, &small) {
						buf = make([]byte, small.Needed)
						continue
					}
					if errors.Is(err, eventq.ErrClosed) {
						return
					} else if err != nil {
						t.Error(err)
						return
					}
					v.add(append([]byte(nil), buf[:n]...))
				}
			case 2: // RecvBatch
				drainBatches(ctx, t, c, v, 16)
			case 3: // All
				drain(context.Background(), t, c, v)
			}
		})
	}()
	goN(producers, func(p int) {
		ctx := context.Background()
		switch p % 3 {
		case 0: // Send
			for seq := uint64(0); seq < per; seq++ {
				if err := c.Send(ctx, makeMsg(uint32(p), seq)); err != nil {
					t.Error(err)
					return
				}
			}
		case 1: // TrySend, then Send when full
			for seq := uint64(0); seq < per; seq++ {
				m := makeMsg(uint32(p), seq)
				err := c.TrySend(m)
				if errors.Is(err, eventq.ErrWouldBlock) {
					err = c.Send(ctx, m)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		case 2: // SendBatch of 10
			for seq := uint64(0); seq < per; seq += 10 {
				var batch [][]byte
				for i := uint64(0); i < 10; i++ {
					batch = append(batch, makeMsg(uint32(p), seq+i))
				}
				if n, err := c.SendBatch(ctx, batch); err != nil || n != len(batch) {
					t.Errorf("SendBatch: %d, %v", n, err)
					return
				}
			}
		}
	})
	c.Close()
	<-consumers
	tr.verify(t)
	totalMessages.Add(producers * per)
	st, _ := c.Stats()
	if st.PeakDepth > 64 || st.Sent != producers*per || st.Received != producers*per {
		t.Errorf("stats: %+v", st)
	}
}
