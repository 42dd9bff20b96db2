// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
	"github.com/libeventq/libeventq/bindings/go/internal/ctest"
)

// Benchmarks: one producer goroutine and one consumer goroutine moving
// 16-byte messages through a channel of capacity 1024, through libeventq
// (single and batch paths) and through Go's own buffered channel, in the
// same run. b.N counts messages, so ns/op is ns per message; msgs/s is
// reported too. For the eventq cases, the diagnostic metrics are per
// message:
//
//   - cgo/msg:    cgo calls (runtime.NumCgoCall) by both goroutines;
//   - parks/msg:  times a goroutine parked in the netpoller (send or
//     receive found the channel full or empty);
//   - rings/msg:  writes to the receive eventfd (the queue leaving empty);
//   - msgs/recv:  messages per receive call (batch cases).
//
// The c-floor cases run the same workload in C (a producer and a consumer
// pthread, blocking calls of the C ABI, no Go at all): the library's own
// speed on this machine, which the binding can approach but not pass.
//
// Run: go test -run '^$' -bench . -benchmem -count 5

var payload = []byte("0123456789abcdef")

const benchCap = 1024

// cFloor runs the workload of the eventq cases in C (see ctest.Bench1P1C);
// the benchmark's timer runs over it.
func cFloor(b *testing.B, batch int) {
	if ns := ctest.Bench1P1C(payload, uint64(b.N), batch, benchCap); ns < 0 {
		b.Fatalf("ctest.Bench1P1C: %d", ns)
	}
	msgsPerSec(b)
}

func msgsPerSec(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// probe counts a run's cgo calls and parks and reports them per message.
type probe struct {
	c         *eventq.Chan
	cgo0      int64
	parks     atomic.Int64
	recvCalls atomic.Int64
}

func newProbe(c *eventq.Chan) *probe {
	p := &probe{c: c}
	eventq.SetParkHook(c, func(bool) { p.parks.Add(1) })
	p.cgo0 = runtime.NumCgoCall()
	return p
}

func (p *probe) report(b *testing.B) {
	cgo := runtime.NumCgoCall() - p.cgo0
	eventq.SetParkHook(p.c, nil)
	n := float64(b.N)
	msgsPerSec(b)
	b.ReportMetric(float64(cgo)/n, "cgo/msg")
	b.ReportMetric(float64(p.parks.Load())/n, "parks/msg")
	if st, err := p.c.Stats(); err == nil {
		b.ReportMetric(float64(st.RecvDoorbellRings)/n, "rings/msg")
	}
	if r := p.recvCalls.Load(); r > 0 {
		b.ReportMetric(n/float64(r), "msgs/recv")
	}
}

func BenchmarkSendRecv(b *testing.B) {
	ctx := context.Background()
	// Send / Recv: Recv returns a new slice per message (1 alloc/msg).
	b.Run("eventq", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(benchCap))
		b.ReportAllocs()
		p := newProbe(c)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < b.N; i++ {
				if _, err := c.Recv(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		for i := 0; i < b.N; i++ {
			if err := c.Send(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		p.report(b)
	})
	// Send / RecvInto a reused buffer: no allocation.
	b.Run("eventq-RecvInto", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(benchCap))
		b.ReportAllocs()
		p := newProbe(c)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64)
			for i := 0; i < b.N; i++ {
				if _, err := c.RecvInto(ctx, buf); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		for i := 0; i < b.N; i++ {
			if err := c.Send(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		p.report(b)
	})
	// The C ABI alone: eventq_chan_send / eventq_chan_recv in C threads.
	b.Run("c-floor", func(b *testing.B) { cFloor(b, 1) })
	// Go's buffered chan []byte of the same capacity, one message per
	// operation, the same slice each time (no copy).
	b.Run("gochan", func(b *testing.B) {
		b.ReportAllocs()
		gochanPerMsg(b)
	})
	// The same with a copy of each message, as a send into eventq makes.
	b.Run("gochan-copy", func(b *testing.B) {
		b.ReportAllocs()
		ch := make(chan []byte, benchCap)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < b.N; i++ {
				<-ch
			}
		}()
		for i := 0; i < b.N; i++ {
			ch <- append([]byte(nil), payload...)
		}
		<-done
		msgsPerSec(b)
	})
}

// gochanPerMsg moves b.N messages through a Go chan []byte of capacity
// benchCap, one per channel operation, no copy.
func gochanPerMsg(b *testing.B) {
	ch := make(chan []byte, benchCap)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			<-ch
		}
	}()
	for i := 0; i < b.N; i++ {
		ch <- payload
	}
	<-done
	msgsPerSec(b)
}

func BenchmarkBatch(b *testing.B) {
	const batch = 64
	ctx := context.Background()
	msgs := make([][]byte, batch)
	for i := range msgs {
		msgs[i] = payload
	}
	// SendBatch of 64 / RecvBatch of up to 64 (new [][]byte per batch:
	// two allocations per call, shared by its messages).
	b.Run("eventq-SendBatch-RecvBatch", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(benchCap))
		b.ReportAllocs()
		p := newProbe(c)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got := 0; got < b.N; {
				m, err := c.RecvBatch(ctx, batch)
				if err != nil {
					b.Error(err)
					return
				}
				p.recvCalls.Add(1)
				got += len(m)
			}
		}()
		for sent := 0; sent < b.N; {
			n := min(batch, b.N-sent)
			k, err := c.SendBatch(ctx, msgs[:n])
			if err != nil {
				b.Fatal(err)
			}
			sent += k
		}
		<-done
		p.report(b)
	})
	// SendBatch of 64 / RecvBatchInto reused buffers (no allocation).
	b.Run("eventq-SendBatch-RecvBatchInto", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(benchCap))
		b.ReportAllocs()
		p := newProbe(c)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, batch*64)
			lens := make([]int, batch)
			for got := 0; got < b.N; {
				n, err := c.RecvBatchInto(ctx, buf, lens)
				if err != nil {
					b.Error(err)
					return
				}
				p.recvCalls.Add(1)
				got += n
			}
		}()
		for sent := 0; sent < b.N; {
			n := min(batch, b.N-sent)
			k, err := c.SendBatch(ctx, msgs[:n])
			if err != nil {
				b.Fatal(err)
			}
			sent += k
		}
		<-done
		p.report(b)
	})
	// The C ABI alone: eventq_chan_send_batch / eventq_chan_recv_batch of
	// 64 in C threads.
	b.Run("c-floor-batch", func(b *testing.B) { cFloor(b, batch) })
	// Like for like: the same messages through Go's buffered chan []byte,
	// one message per channel operation (what Go code would otherwise do).
	b.Run("gochan-1msg-per-op", func(b *testing.B) {
		b.ReportAllocs()
		gochanPerMsg(b)
	})
	// Not like for like: chan [][]byte, one operation moves a slice of 64
	// message pointers (no copy of any message; 16 slots = 1024 messages).
	b.Run("gochan-64msgs-per-op", func(b *testing.B) {
		b.ReportAllocs()
		ch := make(chan [][]byte, benchCap/batch)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got := 0; got < b.N; {
				got += len(<-ch)
			}
		}()
		for sent := 0; sent < b.N; {
			n := min(batch, b.N-sent)
			ch <- msgs[:n]
			sent += n
		}
		<-done
		msgsPerSec(b)
	})
}

// One goroutine, no waiting: the cost of the crossings into the library
// (a TrySend into an empty channel and the TryRecv that empties it again:
// both doorbell transitions every time).
func BenchmarkTrySendTryRecv(b *testing.B) {
	b.Run("eventq", func(b *testing.B) {
		c := newChan(b)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.TrySend(payload)
			if _, err := c.TryRecv(); err != nil {
				b.Fatal(err)
			}
		}
		msgsPerSec(b)
	})
	// The same with 512 messages queued throughout: no doorbell
	// transition, so no syscall; what is left is the crossings and the
	// library's work.
	b.Run("eventq-nonempty", func(b *testing.B) {
		c := newChan(b)
		for range benchCap / 2 {
			c.TrySend(payload)
		}
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.TrySend(payload)
			if _, err := c.TryRecv(); err != nil {
				b.Fatal(err)
			}
		}
		msgsPerSec(b)
	})
	b.Run("gochan", func(b *testing.B) {
		ch := make(chan []byte, benchCap)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			select {
			case ch <- payload:
			default:
			}
			select {
			case <-ch:
			default:
				b.Fatal("empty")
			}
		}
		msgsPerSec(b)
	})
}

// The fixed cost of one cgo crossing (eventq_version), for reference.
func BenchmarkCgoCall(b *testing.B) {
	for i := 0; i < b.N; i++ {
		eventq.CgoCall()
	}
}

// BenchmarkLoop: the loop's Go callbacks, run in plain Go once the
// library's call has returned (exec.go). chan-source:
// b.N messages (up to 1 Mi queued beforehand, the rest sent as the loop
// makes room), one ChanFunc call each, within one Run (budget 64). run-once: one message per RunOnce(0), as an embedder that
// polls the loop's fd calls it.
func BenchmarkLoop(b *testing.B) {
	b.Run("chan-source", func(b *testing.B) {
		lp, _ := eventq.NewLoop()
		defer lp.Close()
		c, _ := eventq.NewChan(eventq.WithCapacity(1 << 20))
		defer c.Release()
		n := 0
		src, _ := lp.AddChan(c, func(*eventq.Source, []byte, bool) error {
			if n++; n == b.N {
				lp.Stop()
			}
			return nil
		})
		src.SetBudget(64)
		for i := 0; i < b.N && i < 1<<20; i++ {
			c.TrySend(payload)
		}
		go func() { // the rest, as the loop makes room
			for i := 1 << 20; i < b.N; i++ {
				c.Send(context.Background(), payload)
			}
		}()
		b.ResetTimer()
		if err := lp.Run(); err != nil {
			b.Fatal(err)
		}
		msgsPerSec(b)
	})
	b.Run("run-once", func(b *testing.B) {
		lp, _ := eventq.NewLoop()
		defer lp.Close()
		c, _ := eventq.NewChan()
		defer c.Release()
		lp.AddChan(c, func(*eventq.Source, []byte, bool) error { return nil })
		for i := 0; i < b.N; i++ {
			c.TrySend(payload)
			if n, err := lp.RunOnce(0); n != 1 || err != nil {
				b.Fatal(n, err)
			}
		}
		msgsPerSec(b)
	})
}
