// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
	"github.com/libeventq/libeventq/bindings/go/internal/ctest"
)

// The Go and C sides build the same bytes and accept each other's.
func TestMessageFormatMatchesC(t *testing.T) {
	for p := uint32(0); p < 9; p++ {
		for seq := uint64(0); seq < 200; seq += 7 {
			g, c := makeMsg(p, seq), ctest.Make(p, seq)
			if !bytes.Equal(g, c) {
				t.Fatalf("(%d,%d): Go %x, C %x", p, seq, g, c)
			}
			if gp, gs, ok := ctest.Check(g); !ok || gp != p || gs != seq {
				t.Fatalf("C rejects Go's (%d,%d)", p, seq)
			}
		}
	}
	m := makeMsg(3, 4)
	m[len(m)/2] ^= 1
	if _, _, ok := ctest.Check(m); ok {
		t.Fatal("C accepts a corrupted message")
	}
	if _, _, ok := checkMsg(append(makeMsg(1, 1), makeMsg(1, 2)...)); ok {
		t.Fatal("Go accepts two merged messages")
	}
}

// Producers in C threads (blocking sends, single and batched) into Go
// consumers waiting in the netpoller.
func TestCrossCProducersToGoConsumers(t *testing.T) {
	const producers, per = 4, 25_000
	c := newChan(t, eventq.WithCapacity(256))
	tr := newTracker(producers, per)
	// Two C threads send one message per call, two send batches of 16.
	single := ctest.StartProducers(c.CloneC(), 2, 0, per, 1)
	batched := ctest.StartProducers(c.CloneC(), 2, 2, per, 16)
	totalCThreads.Add(producers)
	go func() {
		sent1, rc1 := single.Wait()
		sent2, rc2 := batched.Wait()
		if rc1 != 0 || rc2 != 0 || sent1+sent2 != producers*per {
			t.Errorf("C producers: sent %d, rc %d %d", sent1+sent2, rc1, rc2)
		}
		c.Close()
	}()
	goN(4, func(i int) {
		v := tr.consumer()
		if i%2 == 0 {
			drain(context.Background(), t, c, v)
			return
		}
		drainBatches(context.Background(), t, c, v, 64)
	})
	tr.verify(t)
	totalMessages.Add(producers * per)
}

// Go producers (every send path) into a C thread running a libeventq loop
// with a channel source; the C side checks D1-D3 per message.
func TestCrossGoProducersToCLoop(t *testing.T) {
	const producers, per = 8, 10_000
	c := newChan(t, eventq.WithCapacity(128))
	cons := ctest.StartConsumer(c.CloneC(), producers, 0)
	totalCThreads.Add(1)
	goN(producers, func(p int) {
		ctx := context.Background()
		if p%2 == 0 {
			for seq := uint64(0); seq < per; seq++ {
				if err := c.Send(ctx, makeMsg(uint32(p), seq)); err != nil {
					t.Error(err)
					return
				}
			}
			return
		}
		for seq := uint64(0); seq < per; seq += 25 {
			batch := make([][]byte, 25)
			for i := range batch {
				batch[i] = makeMsg(uint32(p), seq+uint64(i))
			}
			if n, err := c.SendBatch(ctx, batch); err != nil || n != 25 {
				t.Errorf("SendBatch: %d, %v", n, err)
				return
			}
		}
	})
	c.Close()
	res := cons.Wait()
	if res.Received != producers*per || res.Bad != 0 || res.OutOfOrder != 0 || res.EOF != 1 || res.RC != 0 {
		t.Errorf("C loop consumer: %+v", res)
	}
	for p, next := range res.Next {
		if next != per {
			t.Errorf("producer %d: %d messages in order, want %d", p, next, per)
		}
	}
	totalMessages.Add(producers * per)
}

// A C producer process (tests/cross/producer, its path in
// EVENTQ_CROSS_PRODUCER; make test-go builds it) into this Go process: two
// C threads send per messages each through a process-shared channel, Go
// goroutines receive them (Recv and RecvBatch, waiting in the netpoller),
// each exactly once, whole and in its producer's order, then end of
// stream. Once the C process makes the channel and hands the receiving end
// over (RecvChanFrom) and closes it at the end; once Go makes it and hands
// the sending end over (SendTo), and the C process exits without closing:
// the stream ends with its death.
func TestCrossCProducerProcessToGo(t *testing.T) {
	bin := os.Getenv("EVENTQ_CROSS_PRODUCER")
	if bin == "" {
		t.Skip("EVENTQ_CROSS_PRODUCER is not set (make test-go builds the C producer and sets it)")
	}
	const per = 10_000
	for _, tc := range []struct{ mode, end string }{{"send-to", "close"}, {"recv-from", "exit"}} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx := watchdog(t)
			c, mine := startWithSocket(t, exec.CommandContext(ctx, bin, tc.mode, "3", strconv.Itoa(per), tc.end))
			var rx *eventq.Chan
			var err error
			if tc.mode == "recv-from" {
				rx = newSharedChan(t, eventq.SideRecv, eventq.WithCapacity(64))
				err = rx.SendTo(mine)
			} else if rx, err = eventq.RecvChanFrom(mine); err == nil {
				defer rx.Release()
			}
			if err != nil {
				t.Fatal(err)
			}
			if rx.Side() != eventq.SideRecv {
				t.Fatalf("Side() = %v", rx.Side())
			}
			receiveAll(ctx, t, rx, per)
			c.wait(t)
		})
	}
}
