// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// readable polls fd without waiting.
func readable(t *testing.T, fd int) bool {
	t.Helper()
	pfd := struct {
		fd      int32
		events  int16
		revents int16
	}{fd: int32(fd), events: 1 /* POLLIN */}
	var ts syscall.Timespec
	n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e != 0 {
		t.Fatalf("ppoll: %v", e)
	}
	return n == 1 && pfd.revents&1 != 0
}

// parkSignal returns a channel that receives once per time a receive (or
// send) on c is about to park in the netpoller.
func parkSignal(t *testing.T, c *eventq.Chan, send bool) <-chan struct{} {
	parked := make(chan struct{}, 1024)
	eventq.SetParkHook(c, func(s bool) {
		if s == send {
			parked <- struct{}{}
		}
	})
	t.Cleanup(func() { eventq.SetParkHook(c, nil) })
	return parked
}

func TestErrorsWrapErrno(t *testing.T) {
	c := newChan(t, eventq.WithCapacity(1), eventq.WithMaxMessageSize(8))
	if _, err := c.TryRecv(); !errors.Is(err, eventq.ErrWouldBlock) || !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("TryRecv on empty: %v", err)
	}
	if err := c.TrySend(make([]byte, 9)); !errors.Is(err, eventq.ErrTooLarge) || !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("TrySend too large: %v", err)
	}
	if err := c.TrySend([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.TrySend([]byte("b")); !errors.Is(err, eventq.ErrWouldBlock) || !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("TrySend on full: %v", err)
	}
	c.Close()
	if err := c.TrySend([]byte("c")); !errors.Is(err, eventq.ErrClosed) || !errors.Is(err, syscall.EPIPE) {
		t.Errorf("TrySend after close: %v", err)
	}
	if err := c.Send(context.Background(), []byte("c")); !errors.Is(err, eventq.ErrClosed) {
		t.Errorf("Send after close: %v", err)
	}
	if m, err := c.TryRecv(); err != nil || string(m) != "a" {
		t.Errorf("queued message after close: %q, %v", m, err)
	}
	if _, err := c.Recv(context.Background()); !errors.Is(err, eventq.ErrClosed) || !errors.Is(err, syscall.EPIPE) {
		t.Errorf("Recv at end of stream: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, opts := range [][]eventq.Option{
		{eventq.WithCapacity(0)},
		{eventq.WithCapacity(4), eventq.WithLowWater(4)},
		{eventq.WithMaxBytes(10), eventq.WithMaxMessageSize(11)},
		{eventq.WithCapacity(-1)},
	} {
		if _, err := eventq.NewChan(opts...); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("NewChan with bad options: %v", err)
		}
	}
	if eventq.Strerror(-int(syscall.EPIPE)) == "" || eventq.Version() == "" {
		t.Error("Strerror/Version empty")
	}
}

// D7: a too-small buffer leaves the message at the head, and says how much
// it needs.
func TestRecvIntoTooSmallKeepsMessage(t *testing.T) {
	c := newChan(t)
	msg := bytes.Repeat([]byte("x"), 100)
	c.TrySend(msg)
	c.TrySend([]byte("next"))
	_, err := c.RecvInto(context.Background(), make([]byte, 10))
	var small *eventq.BufferTooSmallError
	if !errors.As(err, &small) || small.Needed != 100 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("RecvInto small: %v", err)
	}
	buf := make([]byte, small.Needed)
	if n, err := c.RecvInto(context.Background(), buf); err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("RecvInto: %d, %v", n, err)
	}
	if m, _ := c.TryRecv(); string(m) != "next" {
		t.Fatalf("then %q", m)
	}
}

// Whole messages of every size: empty, above the stack buffer of Recv,
// above RecvBatch's initial packed buffer.
func TestMessageSizes(t *testing.T) {
	c := newChan(t, eventq.WithMaxMessageSize(1<<20))
	sizes := []int{0, 1, 511, 512, 513, 4096, 100_000, 0, 200_000, 3}
	mk := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		return b
	}
	for round := 0; round < 3; round++ {
		for i, n := range sizes {
			if err := c.TrySend(mk(i, n)); err != nil {
				t.Fatal(err)
			}
		}
		var got [][]byte
		switch round {
		case 0:
			for range sizes {
				m, err := c.Recv(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, m)
			}
		case 1:
			for len(got) < len(sizes) {
				batch, err := c.RecvBatch(context.Background(), 4)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, batch...)
			}
		case 2:
			msgs := make([][]byte, len(sizes))
			for i, n := range sizes {
				msgs[i] = mk(i, n)
			}
			c.Recv(context.Background()) // empty the queue first
			for range sizes[1:] {
				c.TryRecv()
			}
			if n, err := c.SendBatch(context.Background(), msgs); err != nil || n != len(msgs) {
				t.Fatalf("SendBatch: %d %v", n, err)
			}
			for len(got) < len(sizes) {
				batch, err := c.RecvBatch(context.Background(), 0)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, batch...)
			}
		}
		for i, n := range sizes {
			if !bytes.Equal(got[i], mk(i, n)) || got[i] == nil {
				t.Fatalf("round %d: message %d (%d bytes) came back as %d bytes", round, i, n, len(got[i]))
			}
		}
		// A batch's messages share a buffer: appending to one must not
		// overwrite the next.
		if round == 1 {
			_ = append(got[0], 0xff)
			if !bytes.Equal(got[1], mk(1, 1)) {
				t.Fatal("append to a batch message overwrote the next")
			}
		}
	}
}

func TestSendBatchStopsAtTooLarge(t *testing.T) {
	c := newChan(t, eventq.WithMaxMessageSize(10))
	n, err := c.SendBatch(context.Background(), [][]byte{[]byte("a"), []byte("b"), make([]byte, 11), []byte("d")})
	if n != 2 || !errors.Is(err, eventq.ErrTooLarge) {
		t.Fatalf("SendBatch: %d, %v", n, err)
	}
	if st, _ := c.Stats(); st.Pending != 2 {
		t.Fatalf("pending %d", st.Pending)
	}
}

// A byte limit holds back a sender until a receive makes room.
func TestMaxBytes(t *testing.T) {
	c := newChan(t, eventq.WithMaxBytes(100))
	parked := parkSignal(t, c, true)
	if err := c.TrySend(make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	if err := c.TrySend(make([]byte, 60)); !errors.Is(err, eventq.ErrWouldBlock) {
		t.Fatalf("over the byte limit: %v", err)
	}
	errc := make(chan error)
	go func() { errc <- c.Send(context.Background(), make([]byte, 60)) }()
	<-parked
	if _, err := c.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Stats(); st.PendingBytes != 60 {
		t.Fatalf("pending bytes %d", st.PendingBytes)
	}
}

func TestRecvContextCancel(t *testing.T) {
	c := newChan(t)
	parked := parkSignal(t, c, false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := c.Recv(ctx)
		errc <- err
	}()
	<-parked
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Recv: %v", err)
	}
	// Every receive path, cancelled while it waits in the netpoller.
	for name, recv := range map[string]func(context.Context) error{
		"Recv":      func(ctx context.Context) error { _, err := c.Recv(ctx); return err },
		"RecvInto":  func(ctx context.Context) error { _, err := c.RecvInto(ctx, make([]byte, 8)); return err },
		"RecvBatch": func(ctx context.Context) error { _, err := c.RecvBatch(ctx, 8); return err },
	} {
		for len(parked) > 0 {
			<-parked
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { errc <- recv(ctx) }()
		<-parked
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled while waiting: %v", name, err)
		}
	}
	// A context already past its deadline on an empty channel.
	expired, cancel2 := context.WithTimeout(context.Background(), -1)
	defer cancel2()
	if _, err := c.Recv(expired); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recv with an expired context: %v", err)
	}
	// Nothing was taken by the cancelled receives; the pooled waiters work.
	c.TrySend([]byte("after"))
	if m, err := c.Recv(context.Background()); err != nil || string(m) != "after" {
		t.Fatalf("Recv after cancellations: %q, %v", m, err)
	}
	// A done context does not stop a receive that finds a message.
	c.TrySend([]byte("ready"))
	if m, err := c.Recv(ctx); err != nil || string(m) != "ready" {
		t.Fatalf("Recv with a done ctx and a message: %q, %v", m, err)
	}
}

func TestSendContextCancel(t *testing.T) {
	c := newChan(t, eventq.WithCapacity(2))
	parked := parkSignal(t, c, true)
	c.TrySend([]byte("1"))
	c.TrySend([]byte("2"))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.Send(ctx, []byte("3")) }()
	<-parked
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Send: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		n, err := c.SendBatch(ctx2, [][]byte{[]byte("4"), []byte("5")})
		if n != 0 {
			t.Errorf("cancelled SendBatch queued %d", n)
		}
		errc <- err
	}()
	<-parked
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled SendBatch: %v", err)
	}
	// The refused messages were not queued (D5): only 1 and 2 are there.
	c.Close()
	var got []string
	msgs, errf := c.All(context.Background())
	for m := range msgs {
		got = append(got, string(m))
	}
	if err := errf(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("queue after cancelled sends: %q", got)
	}
}

// Close while goroutines wait on both sides: all wake, and every message a
// send accepted is received exactly once (D1, D6).
func TestCloseWakesAllWaiters(t *testing.T) {
	const waiters = 16
	t.Run("receivers", func(t *testing.T) {
		c := newChan(t)
		parked := parkSignal(t, c, false)
		var got sync.Map
		var n atomic.Int64
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			go func() {
				for {
					m, err := c.Recv(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if _, dup := got.LoadOrStore(string(m), true); dup {
						t.Errorf("%q received twice", m)
					}
					n.Add(1)
				}
			}()
		}
		totalGoroutines.Add(waiters)
		for i := 0; i < waiters; i++ {
			<-parked
		}
		for i := 0; i < 10; i++ {
			c.TrySend([]byte{byte(i)})
		}
		c.Close()
		for i := 0; i < waiters; i++ {
			if err := <-errs; !errors.Is(err, eventq.ErrClosed) {
				t.Errorf("woken receiver: %v", err)
			}
		}
		if n.Load() != 10 {
			t.Errorf("received %d of 10", n.Load())
		}
	})
	t.Run("senders", func(t *testing.T) {
		c := newChan(t, eventq.WithCapacity(4))
		parked := parkSignal(t, c, true)
		for i := 0; i < 4; i++ {
			c.TrySend([]byte{byte(i)})
		}
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			go func() { errs <- c.Send(context.Background(), []byte("late")) }()
		}
		totalGoroutines.Add(waiters)
		for i := 0; i < waiters; i++ {
			<-parked
		}
		c.Close()
		for i := 0; i < waiters; i++ {
			if err := <-errs; !errors.Is(err, eventq.ErrClosed) {
				t.Errorf("woken sender: %v", err)
			}
		}
		for i := 0; i < 4; i++ {
			if m, err := c.TryRecv(); err != nil || m[0] != byte(i) {
				t.Fatalf("queued message %d after close: %v %v", i, m, err)
			}
		}
		if _, err := c.TryRecv(); !errors.Is(err, eventq.ErrClosed) {
			t.Fatalf("end of stream: %v", err)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		// 16 senders and 4 receivers run on a small channel; Close comes
		// in the middle. What was accepted equals what was received.
		c := newChan(t, eventq.WithCapacity(4))
		const senders, per = 16, 400
		tr := newTracker(senders, per)
		var accepted atomic.Int64
		var closeOnce sync.Once
		closed := make(chan struct{})
		recvDone := make(chan struct{})
		go func() {
			defer close(recvDone)
			goN(4, func(int) {
				v := tr.consumer()
				msgs, errf := c.All(context.Background())
				for m := range msgs {
					v.add(m)
					if tr.received.Load() >= senders*per/3 {
						closeOnce.Do(func() {
							c.Close()
							close(closed)
						})
					}
				}
				if err := errf(); err != nil {
					t.Error(err)
				}
			})
		}()
		goN(senders, func(p int) {
			for seq := uint64(0); seq < per; seq++ {
				if err := c.Send(context.Background(), makeMsg(uint32(p), seq)); err != nil {
					if !errors.Is(err, eventq.ErrClosed) {
						t.Error(err)
					}
					return
				}
				accepted.Add(1)
			}
		})
		<-recvDone
		select {
		case <-closed:
		default:
			t.Fatal("no receiver closed the channel")
		}
		for _, e := range tr.errs {
			t.Error(e)
		}
		if got := tr.received.Load(); got != accepted.Load() || got < senders*per/3 {
			t.Fatalf("accepted %d, received %d", accepted.Load(), got)
		}
		st, _ := c.Stats()
		if int64(st.Sent) != accepted.Load() || st.Received != st.Sent || st.Pending != 0 {
			t.Fatalf("stats %+v, accepted %d", st, accepted.Load())
		}
		totalMessages.Add(accepted.Load())
	})
}

// Many goroutines on one small channel, both sides waiting all the time:
// more waiters than the waiter pool keeps.
func TestManyGoroutinesOneChan(t *testing.T) {
	const senders, receivers, per = 64, 64, 300
	c := newChan(t, eventq.WithCapacity(8))
	tr := newTracker(senders, per)
	done := make(chan struct{})
	go func() {
		defer close(done)
		goN(receivers, func(i int) {
			v := tr.consumer()
			for {
				var err error
				if i%2 == 0 {
					var m []byte
					if m, err = c.Recv(context.Background()); err == nil {
						v.add(m)
					}
				} else {
					var b [][]byte
					if b, err = c.RecvBatch(context.Background(), 3); err == nil {
						for _, m := range b {
							v.add(m)
						}
					}
				}
				if errors.Is(err, eventq.ErrClosed) {
					return
				} else if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}()
	goN(senders, func(p int) {
		for seq := uint64(0); seq < per; seq++ {
			if err := c.Send(context.Background(), makeMsg(uint32(p), seq)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	c.Close()
	<-done
	tr.verify(t)
	totalMessages.Add(senders * per)
}

// The send fd is made on first use (SendFd here), at the level of the
// channel's state then: down when full, up once drained to low water; a
// Send that waits for room makes it too.
func TestSendFdMadeOnFirstUse(t *testing.T) {
	c := newChan(t, eventq.WithCapacity(2))
	for _, m := range []string{"1", "2"} {
		if err := c.TrySend([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.TrySend([]byte("3")); !errors.Is(err, eventq.ErrWouldBlock) {
		t.Fatalf("full: %v", err)
	}
	sfd := c.SendFd()
	if sfd < 0 || readable(t, sfd) {
		t.Fatalf("send fd %d made on a full channel: must exist and not be readable", sfd)
	}
	if c.SendFd() != sfd {
		t.Fatal("a second SendFd made another fd")
	}
	for i := 0; i < 2; i++ {
		if _, err := c.TryRecv(); err != nil {
			t.Fatal(err)
		}
	}
	if !readable(t, sfd) {
		t.Fatal("drained: send fd not readable")
	}
	// A clone shares it; a fresh channel's Send waiting for room makes it.
	c2 := newChan(t, eventq.WithCapacity(1))
	if err := c2.TrySend([]byte("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := c2.Send(ctx, []byte("y")); err == nil {
		t.Fatal("a send on a full channel succeeded")
	}
	if fd := c2.SendFd(); fd < 0 || readable(t, fd) {
		t.Fatalf("send fd %d after a timed-out send: must exist and not be readable", fd)
	}
}

// D4 and D5 seen from Go with poll(2) at quiescent points.
func TestFdReadiness(t *testing.T) {
	c := newChan(t, eventq.WithCapacity(8), eventq.WithLowWater(2))
	rfd, sfd := c.RecvFd(), c.SendFd()
	check := func(when string, wantR, wantS bool) {
		t.Helper()
		if r, s := readable(t, rfd), readable(t, sfd); r != wantR || s != wantS {
			t.Fatalf("%s: recv fd readable %v (want %v), send fd readable %v (want %v)", when, r, wantR, s, wantS)
		}
	}
	check("empty", false, true)
	c.TrySend([]byte("1"))
	check("one pending", true, true)
	for i := 0; i < 7; i++ {
		c.TrySend([]byte("x"))
	}
	check("full", true, false)
	for i := 0; i < 5; i++ {
		c.TryRecv()
	}
	check("3 pending, above low water", true, false)
	c.TryRecv()
	check("at low water", true, true)
	c.TryRecv()
	c.TryRecv()
	check("drained", false, true)
	c.Close()
	check("closed", true, true)
	c.TryRecv()
	check("closed, end of stream seen", true, true)
}

// A Go program polling the channel itself: RecvFile in the netpoller with
// TryRecv inside SyscallConn().Read, as the package does internally.
func TestUserPollsRecvFile(t *testing.T) {
	const n = 2000
	c := newChan(t, eventq.WithCapacity(32))
	f, err := c.RecvFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for seq := uint64(0); seq < n; seq++ {
			c.Send(context.Background(), makeMsg(0, seq))
		}
		c.Close()
	}()
	tr := newTracker(1, n)
	v := tr.consumer()
	eof := false
	for !eof {
		err := rc.Read(func(uintptr) bool {
			for {
				m, err := c.TryRecv()
				switch {
				case err == nil:
					v.add(m)
				case errors.Is(err, eventq.ErrWouldBlock):
					return false
				default:
					eof = errors.Is(err, eventq.ErrClosed)
					return true
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tr.verify(t)
	totalMessages.Add(n)
}

// All and Batches: breaking out takes nothing more than was yielded, and
// the error function tells end of stream (nil) from a failed receive.
func TestAllAndBatches(t *testing.T) {
	c := newChan(t)
	for seq := uint64(0); seq < 10; seq++ {
		c.TrySend(makeMsg(0, seq))
	}
	msgs, errf := c.All(context.Background())
	i := 0
	for m := range msgs {
		if _, seq, _ := checkMsg(m); seq != uint64(i) {
			t.Fatalf("message %d: seq %d", i, seq)
		}
		if i++; i == 3 {
			break
		}
	}
	if err := errf(); err != nil {
		t.Fatalf("error after a break: %v", err)
	}
	batches, berrf := c.Batches(context.Background(), 4)
	for batch := range batches {
		if _, seq, _ := checkMsg(batch[0]); seq != 3 || len(batch) != 4 {
			t.Fatalf("batch after break: first seq %d, %d messages", seq, len(batch))
		}
		break
	}
	if err := berrf(); err != nil {
		t.Fatalf("Batches error after a break: %v", err)
	}
	if st, _ := c.Stats(); st.Pending != 3 {
		t.Fatalf("pending %d, want 3", st.Pending)
	}

	// Cancellation is not end of stream: the error function says which.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		c.TryRecv()
	}
	cmsgs, cerrf := c.All(ctx)
	for range cmsgs {
		t.Fatal("a message from an empty channel")
	}
	if err := cerrf(); !errors.Is(err, context.Canceled) {
		t.Fatalf("All with a cancelled ctx on an empty channel: %v", err)
	}
	cbatches, cberrf := c.Batches(ctx, 0)
	for range cbatches {
		t.Fatal("a batch from an empty channel")
	}
	if err := cberrf(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Batches with a cancelled ctx on an empty channel: %v", err)
	}

	// End of stream: the rest, then nil. A second range over the same
	// iterator starts afresh: its error is its own.
	c.TrySend([]byte("last"))
	c.Close()
	var got []string
	for m := range cmsgs {
		got = append(got, string(m))
	}
	if err := cerrf(); err != nil || len(got) != 1 || got[0] != "last" {
		t.Fatalf("end of stream: %q, %v", got, err)
	}
	for range cbatches {
		t.Fatal("a batch after end of stream")
	}
	if err := cberrf(); err != nil {
		t.Fatalf("Batches at end of stream: %v", err)
	}

	// A released handle.
	c2 := newChan(t)
	m2, errf2 := c2.All(context.Background())
	b2, berrf2 := c2.Batches(context.Background(), 0)
	c2.Release()
	for range m2 {
		t.Fatal("a message from a released handle")
	}
	for range b2 {
		t.Fatal("a batch from a released handle")
	}
	if !errors.Is(errf2(), eventq.ErrReleased) || !errors.Is(berrf2(), eventq.ErrReleased) {
		t.Fatalf("released handle: %v, %v", errf2(), berrf2())
	}
}

// Release frees one handle: clones keep the channel; waiters on the
// released handle wake; the last release reports the dropped messages.
func TestRelease(t *testing.T) {
	c, err := eventq.NewChan(eventq.WithCapacity(4))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := c.Clone()
	if err != nil {
		t.Fatal(err)
	}
	parked := parkSignal(t, c, false)
	errc := make(chan error)
	go func() {
		_, err := c.Recv(context.Background())
		errc <- err
	}()
	<-parked
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("waiter on a released handle: %v", err)
	}
	if err := c.Release(); !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("second Release: %v", err)
	}
	if err := c.TrySend(nil); !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("TrySend on a released handle: %v", err)
	}
	// A released handle's fd numbers may be closed or reused: -1.
	if c.RecvFd() != -1 || c.SendFd() != -1 {
		t.Fatalf("fds of a released handle: %d %d", c.RecvFd(), c.SendFd())
	}
	if !readable(t, c2.SendFd()) || readable(t, c2.RecvFd()) {
		t.Fatalf("the clone's fds (%d, %d) after the first handle's release", c2.RecvFd(), c2.SendFd())
	}
	if _, ok := c.FinalStats(); ok {
		t.Fatal("final stats from a handle that was not the last")
	}
	// The channel lives on through the clone.
	c2.TrySend([]byte("a"))
	c2.TrySend([]byte("b"))
	c2.TrySend([]byte("c"))
	c2.TryRecv()
	c2.Release()
	if c2.RecvFd() != -1 || c2.SendFd() != -1 {
		t.Fatalf("fds after the last release: %d %d", c2.RecvFd(), c2.SendFd())
	}
	st, ok := c2.FinalStats()
	if !ok || st.Dropped != 2 || st.Sent != 3 || st.Received != 1 {
		t.Fatalf("final stats %+v %v", st, ok)
	}
}

// The finalizer frees a handle nobody released.
func TestFinalizerBackstop(t *testing.T) {
	before := eventq.LiveChans()
	func() {
		for i := 0; i < 10; i++ {
			c, err := eventq.NewChan()
			if err != nil {
				t.Fatal(err)
			}
			c.TrySend([]byte("dropped"))
		}
	}()
	for i := 0; i < 100 && eventq.LiveChans() > before; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if eventq.LiveChans() > before {
		t.Fatalf("%d handles still live after GC", eventq.LiveChans()-before)
	}
}
