// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Tests of RecvBatchInto and SendPacked: the same contract as the other
// paths (D1-D3 under concurrency, D7 and nothing lost on bad input).

// pack lays msgs out back to back, as SendPacked takes them.
func pack(msgs [][]byte) ([]byte, []int) {
	var buf []byte
	lens := make([]int, len(msgs))
	for i, m := range msgs {
		buf = append(buf, m...)
		lens[i] = len(m)
	}
	return buf, lens
}

// unpack splits what RecvBatchInto received into copies of its messages.
func unpack(buf []byte, lens []int) [][]byte {
	msgs := make([][]byte, len(lens))
	off := 0
	for i, l := range lens {
		msgs[i] = append([]byte{}, buf[off:off+l]...)
		off += l
	}
	return msgs
}

func recvAllNow(t *testing.T, c *eventq.Chan) []string {
	t.Helper()
	var got []string
	for {
		m, err := c.TryRecv()
		if errors.Is(err, eventq.ErrWouldBlock) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m))
	}
}

func TestRecvBatchInto(t *testing.T) {
	ctx := context.Background()
	c := newChan(t)
	want := []string{"a", "", "ccc", "dddd", "eeeee"}
	for _, m := range want {
		if err := c.TrySend([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	lens := []int{-1, -1, -1, 99}
	// At most len(lens) messages; lens[n:] untouched.
	n, err := c.RecvBatchInto(ctx, buf, lens[:3])
	if err != nil || n != 3 {
		t.Fatalf("RecvBatchInto: %d, %v", n, err)
	}
	if got := unpack(buf, lens[:n]); string(got[0]) != "a" || string(got[1]) != "" || string(got[2]) != "ccc" {
		t.Fatalf("got %q", got)
	}
	if lens[3] != 99 {
		t.Fatalf("lens[3] written: %d", lens[3])
	}
	// It stops before a message that does not fit in what is left of buf:
	// "dddd" fits in 6 bytes, "eeeee" does not and stays queued.
	n, err = c.RecvBatchInto(ctx, buf[:6], lens)
	if err != nil || n != 1 || lens[0] != 4 || string(buf[:4]) != "dddd" {
		t.Fatalf("RecvBatchInto into 6 bytes: %d, %v, lens %v", n, err, lens)
	}
	// The head alone does not fit: D7, nothing taken, the length needed.
	n, err = c.RecvBatchInto(ctx, buf[:2], lens)
	var small *eventq.BufferTooSmallError
	if n != 0 || !errors.As(err, &small) || small.Needed != 5 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("RecvBatchInto into 2 bytes: %d, %v", n, err)
	}
	// No room for lengths: EINVAL, nothing taken.
	if n, err := c.RecvBatchInto(ctx, buf, nil); n != 0 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RecvBatchInto with no lens: %d, %v", n, err)
	}
	if got := recvAllNow(t, c); len(got) != 1 || got[0] != "eeeee" {
		t.Fatalf("queue after the errors: %q", got)
	}
	// End of stream.
	c.Close()
	if n, err := c.RecvBatchInto(ctx, buf, lens); n != 0 || !errors.Is(err, eventq.ErrClosed) {
		t.Fatalf("RecvBatchInto at end of stream: %d, %v", n, err)
	}
}

func TestSendPacked(t *testing.T) {
	ctx := context.Background()
	c := newChan(t, eventq.WithMaxMessageSize(10))
	buf, lens := pack([][]byte{[]byte("one"), {}, []byte("three")})
	if n, err := c.SendPacked(ctx, buf, lens); n != 3 || err != nil {
		t.Fatalf("SendPacked: %d, %v", n, err)
	}
	if got := recvAllNow(t, c); len(got) != 3 || got[0] != "one" || got[1] != "" || got[2] != "three" {
		t.Fatalf("got %q", got)
	}
	// Bad lengths: EINVAL before anything is sent.
	for _, bad := range [][]int{{1, -1}, {4, 3}, {7}, {-1}} {
		if n, err := c.SendPacked(ctx, []byte("abcdef"), bad); n != 0 || !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("SendPacked(%v): %d, %v", bad, n, err)
		}
	}
	if st, _ := c.Stats(); st.Pending != 0 {
		t.Fatalf("bad SendPacked queued %d", st.Pending)
	}
	// Nothing to send.
	if n, err := c.SendPacked(ctx, nil, nil); n != 0 || err != nil {
		t.Fatalf("empty SendPacked: %d, %v", n, err)
	}
	// Trailing bytes past the last length are ignored.
	if n, err := c.SendPacked(ctx, []byte("xyz..."), []int{1, 2}); n != 2 || err != nil {
		t.Fatalf("SendPacked with trailing bytes: %d, %v", n, err)
	}
	// A message over the limit ends the prefix, as in SendBatch.
	buf, lens = pack([][]byte{[]byte("a"), make([]byte, 11), []byte("c")})
	if n, err := c.SendPacked(ctx, buf, lens); n != 1 || !errors.Is(err, eventq.ErrTooLarge) {
		t.Fatalf("SendPacked over the limit: %d, %v", n, err)
	}
	if got := recvAllNow(t, c); len(got) != 3 || got[0] != "x" || got[1] != "yz" || got[2] != "a" {
		t.Fatalf("got %q", got)
	}
	// More messages than the channel holds: waits for room, all arrive.
	c2 := newChan(t, eventq.WithCapacity(4), eventq.WithLowWater(3))
	var msgs [][]byte
	for i := range 100 {
		msgs = append(msgs, []byte{byte(i)})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, l := pack(msgs)
		if n, err := c2.SendPacked(ctx, b, l); n != len(msgs) || err != nil {
			t.Errorf("SendPacked of 100 into 4: %d, %v", n, err)
		}
	}()
	rbuf, rlens := make([]byte, 3), make([]int, 3)
	for i := 0; i < len(msgs); {
		n, err := c2.RecvBatchInto(ctx, rbuf, rlens)
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if rlens[j] != 1 || rbuf[j] != byte(i) {
				t.Fatalf("message %d: %v", i, rbuf[:n])
			}
			i++
		}
	}
	<-done
}

// The batch layout round-trips: a received batch forwarded as it is.
func TestForwardPackedBatch(t *testing.T) {
	ctx := context.Background()
	in, out := newChan(t), newChan(t)
	msgs := [][]byte{[]byte("x"), {}, bytes.Repeat([]byte("y"), 300), []byte("z")}
	if n, err := in.SendBatch(ctx, msgs); n != len(msgs) || err != nil {
		t.Fatal(n, err)
	}
	buf, lens := make([]byte, 1024), make([]int, 16)
	n, err := in.RecvBatchInto(ctx, buf, lens)
	if err != nil || n != len(msgs) {
		t.Fatal(n, err)
	}
	if k, err := out.SendPacked(ctx, buf, lens[:n]); k != n || err != nil {
		t.Fatal(k, err)
	}
	got, err := out.RecvBatch(ctx, 0)
	if err != nil || len(got) != len(msgs) {
		t.Fatal(len(got), err)
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d: %q", i, got[i])
		}
	}
}

// D1-D3 with producers on SendPacked and SendBatch and consumers on
// RecvBatchInto, on a small channel so every side waits.
func TestPackedBatchesConcurrent(t *testing.T) {
	const producers, per, consumers = 6, 3000, 4
	c := newChan(t, eventq.WithCapacity(32))
	tr := newTracker(producers, per)
	done := make(chan struct{})
	go func() {
		defer close(done)
		goN(consumers, func(i int) {
			v := tr.consumer()
			// Consumer 0 has room for one message at a time, so the
			// others' buffers are not the only ones exercised.
			size, max := 4096, 1+i*7
			if i == 0 {
				size = 80
			}
			buf, lens := make([]byte, size), make([]int, max)
			for {
				n, err := c.RecvBatchInto(context.Background(), buf, lens)
				if errors.Is(err, eventq.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				off := 0
				for _, l := range lens[:n] {
					v.add(buf[off : off+l])
					off += l
				}
			}
		})
	}()
	goN(producers, func(p int) {
		for seq := uint64(0); seq < per; {
			k := min(uint64(p%5+1), per-seq)
			var batch [][]byte
			for j := range k {
				batch = append(batch, makeMsg(uint32(p), seq+j))
			}
			var n int
			var err error
			if p%2 == 0 {
				b, l := pack(batch)
				n, err = c.SendPacked(context.Background(), b, l)
			} else {
				n, err = c.SendBatch(context.Background(), batch)
			}
			if err != nil || n != len(batch) {
				t.Errorf("producer %d: %d, %v", p, n, err)
				return
			}
			seq += k
		}
	})
	c.Close()
	<-done
	tr.verify(t)
	totalMessages.Add(producers * per)
}

// Cancellation and release of the new calls while they wait: nothing is
// taken or queued by a call that returned an error.
func TestPackedWaitsEnd(t *testing.T) {
	c := newChan(t, eventq.WithCapacity(2))
	recvParked := parkSignal(t, c, false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := c.RecvBatchInto(ctx, make([]byte, 8), make([]int, 2))
		errc <- err
	}()
	<-recvParked
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled RecvBatchInto: %v", err)
	}

	c2 := newChan(t, eventq.WithCapacity(2))
	sendParked := parkSignal(t, c2, true)
	c2.TrySend([]byte("1"))
	c2.TrySend([]byte("2"))
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		n, err := c2.SendPacked(ctx2, []byte("34"), []int{1, 1})
		if n != 0 {
			t.Errorf("cancelled SendPacked queued %d", n)
		}
		errc <- err
	}()
	<-sendParked
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled SendPacked: %v", err)
	}
	if got := recvAllNow(t, c2); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("queue after a cancelled SendPacked: %q", got)
	}

	c3, err := eventq.NewChan()
	if err != nil {
		t.Fatal(err)
	}
	c3.Release()
	if _, err := c3.RecvBatchInto(context.Background(), make([]byte, 8), make([]int, 1)); !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("RecvBatchInto on a released handle: %v", err)
	}
	if _, err := c3.SendPacked(context.Background(), []byte("a"), []int{1}); !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("SendPacked on a released handle: %v", err)
	}
}

// Release while goroutines call on both sides at full speed (the sending
// calls and the others take their references from separate counters):
// every call before it works, every call after it fails with ErrReleased,
// the C handle is freed exactly once, and the final stats account for
// every accepted message.
func TestReleaseDuringTraffic(t *testing.T) {
	c, err := eventq.NewChan(eventq.WithCapacity(64))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := c.Clone() // keeps the channel alive, to count at the end
	if err != nil {
		t.Fatal(err)
	}
	var sent, received, calls atomic.Int64
	released := make(chan error)
	go func() {
		for calls.Load() < 20000 {
			runtime.Gosched()
		}
		released <- c.Release()
	}()
	goN(4, func(i int) {
		for {
			var err error
			switch i {
			case 0:
				if err = c.TrySend([]byte("s")); err == nil {
					sent.Add(1)
				}
			case 1:
				var n int
				if n, err = c.SendPacked(context.Background(), []byte("ab"), []int{1, 1}); n > 0 {
					sent.Add(int64(n))
				}
			case 2:
				if _, err = c.TryRecv(); err == nil {
					received.Add(1)
				}
			case 3:
				var n int
				if n, err = c.RecvBatchInto(context.Background(), make([]byte, 16), make([]int, 4)); n > 0 {
					received.Add(int64(n))
				}
			}
			calls.Add(1)
			if errors.Is(err, eventq.ErrReleased) {
				return
			}
			if err != nil && !errors.Is(err, eventq.ErrWouldBlock) {
				t.Errorf("goroutine %d: %v", i, err)
				return
			}
		}
	})
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, ok := c.FinalStats(); ok {
		t.Fatal("final stats from a handle that was not the last")
	}
	pending := len(recvAllNow(t, c2))
	if int64(pending)+received.Load() != sent.Load() {
		t.Fatalf("sent %d, received %d + %d left", sent.Load(), received.Load(), pending)
	}
	// c's handle was freed: c2's release is the channel's last.
	c2.Release()
	if st, ok := c2.FinalStats(); !ok || int64(st.Sent) != sent.Load() || st.Dropped != 0 {
		t.Fatalf("final stats %+v %v, sent %d", st, ok, sent.Load())
	}
}
