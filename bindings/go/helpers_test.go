// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// The tests' message format, the same as internal/ctest's C one: producer
// id (u32 LE), sequence number (u64 LE), a payload whose length and bytes
// derive from both, and the FNV-1a hash of all that (u32 LE). A merged,
// split, truncated or corrupted message fails checkMsg (D2).

func fnv1a(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

func payloadLen(producer uint32, seq uint64) int {
	return int((seq*13 + uint64(producer)*7) % 53)
}

func makeMsg(producer uint32, seq uint64) []byte {
	n := payloadLen(producer, seq)
	b := make([]byte, 16+n)
	binary.LittleEndian.PutUint32(b, producer)
	binary.LittleEndian.PutUint64(b[4:], seq)
	for i := 0; i < n; i++ {
		b[12+i] = byte(producer*31 + uint32(seq*7) + uint32(i))
	}
	binary.LittleEndian.PutUint32(b[12+n:], fnv1a(b[:12+n]))
	return b
}

func checkMsg(b []byte) (producer uint32, seq uint64, ok bool) {
	if len(b) < 16 {
		return 0, 0, false
	}
	producer = binary.LittleEndian.Uint32(b)
	seq = binary.LittleEndian.Uint64(b[4:])
	if len(b) != 16+payloadLen(producer, seq) ||
		binary.LittleEndian.Uint32(b[len(b)-4:]) != fnv1a(b[:len(b)-4]) {
		return 0, 0, false
	}
	return producer, seq, true
}

// tracker checks D1-D3 over a run: every (producer, seq) is received
// exactly once, whole, and each consumer sees each producer's messages in
// increasing sequence order.
type tracker struct {
	producers int
	per       uint64
	seen      [][]atomic.Bool
	received  atomic.Int64

	mu   sync.Mutex
	errs []string
}

func newTracker(producers int, per uint64) *tracker {
	t := &tracker{producers: producers, per: per, seen: make([][]atomic.Bool, producers)}
	for i := range t.seen {
		t.seen[i] = make([]atomic.Bool, per)
	}
	return t
}

func (t *tracker) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errs) < 20 {
		t.errs = append(t.errs, fmt.Sprintf(format, args...))
	}
}

// consumer is one consumer's view, for the order check; not shared.
type consumer struct {
	t    *tracker
	last []int64
}

func (t *tracker) consumer() *consumer {
	c := &consumer{t: t, last: make([]int64, t.producers)}
	for i := range c.last {
		c.last[i] = -1
	}
	return c
}

func (c *consumer) add(msg []byte) {
	t := c.t
	t.received.Add(1)
	p, seq, ok := checkMsg(msg)
	if !ok || int(p) >= t.producers || seq >= t.per {
		t.fail("D2: bad message (len %d): %x", len(msg), msg)
		return
	}
	if int64(seq) <= c.last[p] {
		t.fail("D3: producer %d: seq %d after %d", p, seq, c.last[p])
	}
	c.last[p] = int64(seq)
	if t.seen[p][seq].Swap(true) {
		t.fail("D1: producer %d seq %d received twice", p, seq)
	}
}

// verify checks that exactly producers*per messages came, each once.
func (t *tracker) verify(tb testing.TB) {
	tb.Helper()
	for _, e := range t.errs {
		tb.Error(e)
	}
	missing := 0
	for p := range t.seen {
		for s := range t.seen[p] {
			if !t.seen[p][s].Load() {
				if missing < 5 {
					tb.Errorf("D1: producer %d seq %d never received", p, s)
				}
				missing++
			}
		}
	}
	if missing > 0 {
		tb.Errorf("D1: %d messages missing", missing)
	}
	if want := int64(t.producers) * int64(t.per); t.received.Load() != want {
		tb.Errorf("received %d messages, want %d", t.received.Load(), want)
	}
}

// counters of what the tests pushed through, reported by TestMain.
var (
	totalMessages   atomic.Int64
	totalGoroutines atomic.Int64
	totalCThreads   atomic.Int64
)

// goN runs n goroutines of fn and waits for them.
func goN(n int, fn func(i int)) {
	totalGoroutines.Add(int64(n))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

func newChan(tb testing.TB, opts ...eventq.Option) *eventq.Chan {
	tb.Helper()
	c, err := eventq.NewChan(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Release() })
	return c
}

// newSharedChan is newChan for a process-shared channel with side made here.
func newSharedChan(tb testing.TB, side eventq.Side, opts ...eventq.Option) *eventq.Chan {
	tb.Helper()
	c, err := eventq.NewSharedChan(side, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Release() })
	return c
}

// drain receives everything until end of stream into the consumer view.
func drain(ctx context.Context, tb testing.TB, c *eventq.Chan, v *consumer) {
	msgs, errf := c.All(ctx)
	for msg := range msgs {
		v.add(msg)
	}
	if err := errf(); err != nil {
		tb.Error(err)
	}
}

// drainBatches is drain through Batches.
func drainBatches(ctx context.Context, tb testing.TB, c *eventq.Chan, v *consumer, max int) {
	batches, errf := c.Batches(ctx, max)
	for batch := range batches {
		for _, m := range batch {
			v.add(m)
		}
	}
	if err := errf(); err != nil {
		tb.Error(err)
	}
}
