package eventq_test

import (
	"context"
	"testing"

	eventq "github.com/libeventq/eventq-go"
)

// Benchmarks: one producer goroutine and one consumer goroutine moving
// 16-byte messages through a channel of capacity 1024, through libeventq
// (single and batch paths) and through Go's own buffered channel, in the
// same run. b.N counts messages; msgs/s is reported.

var payload = []byte("0123456789abcdef")

func msgsPerSec(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkSendRecv(b *testing.B) {
	ctx := context.Background()
	b.Run("eventq", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(1024))
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
		msgsPerSec(b)
	})
	b.Run("eventq-RecvInto", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(1024))
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
		msgsPerSec(b)
	})
	b.Run("gochan", func(b *testing.B) {
		ch := make(chan []byte, 1024)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < b.N; i++ {
				<-ch
			}
		}()
		for i := 0; i < b.N; i++ {
			ch <- payload // the same slice: no copy
		}
		<-done
		msgsPerSec(b)
	})
	b.Run("gochan-copy", func(b *testing.B) {
		ch := make(chan []byte, 1024)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < b.N; i++ {
				<-ch
			}
		}()
		for i := 0; i < b.N; i++ {
			ch <- append([]byte(nil), payload...) // a copy per message, as eventq makes
		}
		<-done
		msgsPerSec(b)
	})
}

func BenchmarkBatch(b *testing.B) {
	const batch = 64
	ctx := context.Background()
	msgs := make([][]byte, batch)
	for i := range msgs {
		msgs[i] = payload
	}
	b.Run("eventq-64", func(b *testing.B) {
		c := newChan(b, eventq.WithCapacity(1024))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got := 0; got < b.N; {
				m, err := c.RecvBatch(ctx, batch)
				if err != nil {
					b.Error(err)
					return
				}
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
		msgsPerSec(b)
	})
	b.Run("gochan-64", func(b *testing.B) {
		ch := make(chan [][]byte, 1024/batch)
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

// One goroutine, no waiting: the cost of a crossing into the library.
func BenchmarkTrySendTryRecv(b *testing.B) {
	b.Run("eventq", func(b *testing.B) {
		c := newChan(b)
		for i := 0; i < b.N; i++ {
			c.TrySend(payload)
			if _, err := c.TryRecv(); err != nil {
				b.Fatal(err)
			}
		}
		msgsPerSec(b)
	})
	b.Run("gochan", func(b *testing.B) {
		ch := make(chan []byte, 1024)
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
