// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
	"github.com/libeventq/libeventq/bindings/go/internal/ctest"
)

// Worker pools: many goroutines receiving from (or sending to) one
// channel. Each message must wake about one goroutine, not all of them
// (one receive attempt per message, however many workers wait), and no
// message may stay queued while a goroutine waits, whatever the workers'
// contexts do.

// pacedAttempts runs workers goroutines in Recv on one channel and sends
// rounds messages one at a time, each only once the previous one was
// received and after a pause (the pool is idle between messages, its
// goroutines asleep and the netpoller blocked in the kernel), and returns the receive attempts per message and the waits
// per message. Every receive attempt is one cgo call (16-byte messages),
// and so is every TrySend: the attempts are the cgo calls of the rounds
// less one per message. A wait is a goroutine about to block in Recv (the
// park hook).
func pacedAttempts(t *testing.T, workers, rounds int, gap time.Duration) (attempts, waits float64) {
	t.Helper()
	c := newChan(t, eventq.WithCapacity(64))
	parked := make(chan struct{}, 1<<16)
	eventq.SetParkHook(c, func(send bool) {
		if !send {
			select {
			case parked <- struct{}{}:
			default:
			}
		}
	})
	defer eventq.SetParkHook(c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{})
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				if _, err := c.Recv(ctx); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	totalGoroutines.Add(int64(workers))
	for range workers {
		<-parked // every worker waits
	}
	msg := []byte("0123456789abcdef")
	round := func() {
		time.Sleep(gap)
		if err := c.TrySend(msg); err != nil {
			t.Fatal(err)
		}
		<-got
	}
	for range 16 { // warm up: the pool's steady state
		round()
	}
	for len(parked) > 0 {
		<-parked
	}
	cgo0 := runtime.NumCgoCall()
	for range rounds {
		round()
	}
	cgo := runtime.NumCgoCall() - cgo0
	nparked := len(parked)
	cancel()
	for range workers {
		<-done
	}
	totalMessages.Add(int64(rounds + 16))
	return float64(cgo-int64(rounds)) / float64(rounds), float64(nparked) / float64(rounds)
}

// One goroutine wakes per message with 8 and 64 workers, at every
// GOMAXPROCS setting: the message goes to one waiting goroutine and the
// others stay asleep. (With each goroutine polling a dup of the receive fd
// of its own, all wake for each message: about 10 attempts per message
// with 8 workers and 40 to 66 with 64, and as many waits.) The attempts
// are about one a message, at most three: the one that takes it, and
// when the receive fd is seen up after the last message went (its
// lowering is left to a sender still writing it), the poller's look at
// the next head; a busy machine makes that more frequent, so the bound is
// what separates one wake-up from one per worker.
func TestPoolAttemptsPerMessage(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 4, 16} {
		runtime.GOMAXPROCS(procs)
		for _, workers := range []int{8, 64} {
			attempts, waits := pacedAttempts(t, workers, 100, 500*time.Microsecond)
			t.Logf("GOMAXPROCS=%d, %d workers: %.2f receive attempts, %.2f waits per message",
				procs, workers, attempts, waits)
			if waits > 1.5 {
				t.Errorf("GOMAXPROCS=%d, %d workers: %.2f waits per message, want 1",
					procs, workers, waits)
			}
			if attempts > 3 {
				t.Errorf("GOMAXPROCS=%d, %d workers: %.2f receive attempts per message, want 1 to 3",
					procs, workers, attempts)
			}
		}
	}
}

// parkSignals returns channels that receive once per time a receive on rx,
// or a send on tx, is about to wait.
func parkSignals(t *testing.T, rx, tx *eventq.Chan) (rparked, sparked <-chan struct{}) {
	r, s := make(chan struct{}, 1024), make(chan struct{}, 1024)
	eventq.SetParkHookAll(func(c *eventq.Chan, send bool) {
		switch {
		case c == rx && !send:
			r <- struct{}{}
		case c == tx && send:
			s <- struct{}{}
		}
	})
	t.Cleanup(func() { eventq.SetParkHookAll(nil) })
	return r, s
}

// poolGOMAXPROCS are the settings the pool's concurrency tests run at.
var poolGOMAXPROCS = []int{1, 2, 4, 16}

// eachGOMAXPROCS runs fn(name) rounds times at each poolGOMAXPROCS setting
// and restores the setting; it stops at the first failed round.
func eachGOMAXPROCS(t *testing.T, rounds int, fn func(name string) bool) {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range poolGOMAXPROCS {
		runtime.GOMAXPROCS(procs)
		start := time.Now()
		for r := range rounds {
			if !fn(fmt.Sprintf("GOMAXPROCS=%d round %d/%d", procs, r+1, rounds)) {
				t.FailNow()
			}
		}
		t.Logf("GOMAXPROCS=%d: %d rounds in %v", procs, rounds, time.Since(start).Round(time.Millisecond))
	}
}

// hung reports a round that did not finish by the watchdog's deadline,
// with every goroutine's stack.
func hung(t *testing.T, name, what string, c *eventq.Chan) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	st, _ := c.Stats()
	t.Errorf("%s: %s after %v (lost wake-up?); stats %+v; goroutines:\n%s", name, what, roundDeadline, st, buf)
}

// waitUntil polls cond until it holds (true) or the watchdog's deadline
// passes (false).
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(roundDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// stormCtx returns the context of one call of a goroutine in a
// cancellation storm: half of them end after a random few microseconds,
// while the call may be waiting, may be running, or has not yet started.
func stormCtx(rng *rand.Rand) (context.Context, context.CancelFunc) {
	if rng.IntN(2) == 0 {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), time.Duration(rng.IntN(100))*time.Microsecond)
}

// stormRecv receives into v, by every receiving call in turn (RecvInto
// sometimes into a buffer too small, which leaves the message queued),
// each with a stormCtx, until end of stream. Calls ended by their context
// are simply made again.
func stormRecv(c *eventq.Chan, v *consumer, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 128)
	small := make([]byte, 8)
	packed := make([]byte, 4*128)
	lens := make([]int, 4)
	for {
		ctx, cancel := stormCtx(rng)
		var err error
		switch rng.IntN(5) {
		case 0:
			var m []byte
			if m, err = c.Recv(ctx); err == nil {
				v.add(m)
			}
		case 1:
			var n int
			if n, err = c.RecvInto(ctx, buf); err == nil {
				v.add(append([]byte(nil), buf[:n]...))
			}
		case 2:
			var tooSmall *eventq.BufferTooSmallError
			if _, err = c.RecvInto(ctx, small); err == nil {
				err = errors.New("RecvInto: a message fit in 8 bytes")
			} else if errors.As(err, &tooSmall) {
				err = nil // the message stays queued: nothing to add
			}
		case 3:
			var ms [][]byte
			if ms, err = c.RecvBatch(ctx, 3); err == nil {
				for _, m := range ms {
					v.add(m)
				}
			}
		case 4:
			var n int
			if n, err = c.RecvBatchInto(ctx, packed, lens); err == nil {
				for _, m := range unpack(packed, lens[:n]) {
					v.add(append([]byte(nil), m...))
				}
			}
		}
		cancel()
		switch {
		case errors.Is(err, eventq.ErrClosed):
			return nil
		case err != nil && ctx.Err() == nil:
			return err
		}
	}
}

// stormSend sends producer p's per messages in order, by every sending
// call in turn, each with a stormCtx; what a call ended by its context did
// not queue is sent again.
func stormSend(c *eventq.Chan, p uint32, per uint64, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 11))
	for seq := uint64(0); seq < per; {
		ctx, cancel := stormCtx(rng)
		var n int
		var err error
		switch k := min(uint64(1+rng.IntN(3)), per-seq); rng.IntN(3) {
		case 0:
			if err = c.Send(ctx, makeMsg(p, seq)); err == nil {
				n = 1
			}
		case 1:
			var batch [][]byte
			for i := range k {
				batch = append(batch, makeMsg(p, seq+i))
			}
			n, err = c.SendBatch(ctx, batch)
		case 2:
			var batch [][]byte
			for i := range k {
				batch = append(batch, makeMsg(p, seq+i))
			}
			buf, lens := pack(batch)
			n, err = c.SendPacked(ctx, buf, lens)
		}
		cancel()
		seq += uint64(n)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("producer %d, message %d: %w", p, seq, err)
		}
	}
	return nil
}

// A cancellation storm while messages flow: 16 goroutines receive with
// every call, half of the calls ending by their context after a few
// microseconds, while 4 producers send 500 messages each (their calls
// cancelled as often) into an 8-slot channel. Every message arrives exactly once, whole, in its
// producer's order; and once the producers are done, every message is
// received while the consumers still wait (before Close): none is left
// queued while goroutines wait. Many short rounds at GOMAXPROCS 1, 2, 4
// and 16.
func TestPoolCancelStorm(t *testing.T) {
	const producers, per, consumers = 4, 500, 16
	eachGOMAXPROCS(t, 20, func(name string) bool {
		c, err := eventq.NewChan(eventq.WithCapacity(8))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		tr := newTracker(producers, per)
		errs := make(chan error, producers+consumers)
		var recvDone sync.WaitGroup
		for i := range consumers {
			recvDone.Add(1)
			go func() {
				defer recvDone.Done()
				errs <- stormRecv(c, tr.consumer(), uint64(i))
			}()
		}
		totalGoroutines.Add(producers + consumers)
		goN(producers, func(p int) { errs <- stormSend(c, uint32(p), per, uint64(100+p)) })
		if !waitUntil(func() bool { return tr.received.Load() == producers*per }) {
			hung(t, name, fmt.Sprintf("%d of %d messages received", tr.received.Load(), producers*per), c)
			c.Close()
			recvDone.Wait()
			return false
		}
		c.Close()
		recvDone.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		tr.verify(t)
		if st, _ := c.Stats(); st.Pending != 0 || st.Received != producers*per {
			t.Errorf("%s: stats %+v", name, st)
		}
		totalMessages.Add(producers * per)
		return !t.Failed()
	})
}

// Senders blocked on a full channel: 32 goroutines send into a 4-slot
// channel (low water 2), their calls cancelled as in the storm, while 2
// consumers drain it. Every accepted message arrives once and in order;
// none waits while there is room (a sender asleep with room would hang
// the round).
func TestPoolSendersBlockedOnFull(t *testing.T) {
	const producers, per, consumers = 32, 100, 2
	eachGOMAXPROCS(t, 12, func(name string) bool {
		c, err := eventq.NewChan(eventq.WithCapacity(4))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		tr := newTracker(producers, per)
		errs := make(chan error, producers+consumers)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var recvDone sync.WaitGroup
			for i := range consumers {
				recvDone.Add(1)
				go func() {
					defer recvDone.Done()
					errs <- consume(context.Background(), c, tr.consumer(), 4*(i%2))
				}()
			}
			goN(producers, func(p int) { errs <- stormSend(c, uint32(p), per, uint64(p)) })
			c.Close()
			recvDone.Wait()
		}()
		totalGoroutines.Add(consumers)
		select {
		case <-done:
		case <-time.After(roundDeadline):
			hung(t, name, fmt.Sprintf("%d of %d messages received", tr.received.Load(), producers*per), c)
			return false
		}
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		tr.verify(t)
		totalMessages.Add(producers * per)
		return !t.Failed()
	})
}

// Close while goroutines wait on both sides, with every receiving and
// sending call: receivers on an empty channel (5 messages come first, then
// Close) and senders on a full one. Every waiter wakes: the receivers get
// the 5 messages between them, then ErrClosed; the senders ErrClosed, and
// nothing they sent was queued.
func TestPoolCloseWakesBothSides(t *testing.T) {
	const waiters = 24
	recvCalls := []func(context.Context, *eventq.Chan) (int, error){
		func(ctx context.Context, c *eventq.Chan) (int, error) { _, err := c.Recv(ctx); return 1, err },
		func(ctx context.Context, c *eventq.Chan) (int, error) {
			_, err := c.RecvInto(ctx, make([]byte, 8))
			return 1, err
		},
		func(ctx context.Context, c *eventq.Chan) (int, error) {
			ms, err := c.RecvBatch(ctx, 2)
			return len(ms), err
		},
		func(ctx context.Context, c *eventq.Chan) (int, error) {
			return c.RecvBatchInto(ctx, make([]byte, 64), make([]int, 2))
		},
	}
	sendCalls := []func(context.Context, *eventq.Chan) error{
		func(ctx context.Context, c *eventq.Chan) error { return c.Send(ctx, []byte("late")) },
		func(ctx context.Context, c *eventq.Chan) error {
			_, err := c.SendBatch(ctx, [][]byte{[]byte("l"), []byte("ate")})
			return err
		},
		func(ctx context.Context, c *eventq.Chan) error {
			_, err := c.SendPacked(ctx, []byte("late"), []int{2, 2})
			return err
		},
	}
	eachGOMAXPROCS(t, 50, func(name string) bool {
		rx := newChan(t, eventq.WithCapacity(8))
		tx := newChan(t, eventq.WithCapacity(4))
		for range 4 {
			tx.TrySend([]byte("full"))
		}
		rparked, sparked := parkSignals(t, rx, tx)
		var got atomic.Int64
		errs := make(chan error, 2*waiters)
		for i := range waiters {
			go func() {
				for {
					n, err := recvCalls[i%len(recvCalls)](context.Background(), rx)
					if err != nil {
						errs <- err
						return
					}
					got.Add(int64(n))
				}
			}()
			go func() { errs <- sendCalls[i%len(sendCalls)](context.Background(), tx) }()
		}
		totalGoroutines.Add(2 * waiters)
		for range waiters {
			<-rparked
			<-sparked
		}
		for i := range 5 {
			rx.TrySend([]byte{byte(i)})
		}
		rx.Close()
		tx.Close()
		timeout := time.After(roundDeadline)
		for range 2 * waiters {
			select {
			case err := <-errs:
				if !errors.Is(err, eventq.ErrClosed) {
					t.Errorf("%s: woken waiter: %v", name, err)
				}
			case <-timeout:
				hung(t, name, "waiters still asleep after Close", rx)
				return false
			}
		}
		if got.Load() != 5 {
			t.Errorf("%s: receivers got %d messages, want 5", name, got.Load())
		}
		if st, _ := tx.Stats(); st.Sent != 4 {
			t.Errorf("%s: the closed full channel accepted %d messages, want 4", name, st.Sent)
		}
		totalMessages.Add(9)
		return !t.Failed()
	})
}

// Release while goroutines wait on both sides of a handle: they wake with
// ErrReleased, and the channel (a clone) keeps what was queued.
func TestPoolReleaseWakesWaiters(t *testing.T) {
	const waiters = 16
	eachGOMAXPROCS(t, 30, func(name string) bool {
		rx, err := eventq.NewChan(eventq.WithCapacity(4))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := eventq.NewChan(eventq.WithCapacity(2))
		if err != nil {
			t.Fatal(err)
		}
		rxClone, _ := rx.Clone()
		txClone, _ := tx.Clone()
		defer rxClone.Release()
		defer txClone.Release()
		tx.TrySend([]byte("a"))
		tx.TrySend([]byte("b"))
		rparked, sparked := parkSignals(t, rx, tx)
		errs := make(chan error, 2*waiters)
		for range waiters {
			go func() { _, err := rx.Recv(context.Background()); errs <- err }()
			go func() { errs <- tx.Send(context.Background(), []byte("c")) }()
		}
		totalGoroutines.Add(2 * waiters)
		for range waiters {
			<-rparked
			<-sparked
		}
		rx.Release()
		tx.Release()
		for range 2 * waiters {
			if err := <-errs; !errors.Is(err, eventq.ErrReleased) {
				t.Errorf("%s: waiter on a released handle: %v", name, err)
			}
		}
		if st, _ := txClone.Stats(); st.Pending != 2 {
			t.Errorf("%s: the clone holds %d messages, want 2", name, st.Pending)
		}
		rxClone.TrySend([]byte("x"))
		if m, err := rxClone.TryRecv(); err != nil || string(m) != "x" {
			t.Errorf("%s: the clone after release: %q %v", name, m, err)
		}
		return !t.Failed()
	})
}

// A Go pool and a C thread running a libeventq loop consume one channel
// side by side, while Go producers send and the pool's calls are
// cancelled: every message is taken once, by one side or the other, and
// the channel drains while both wait.
func TestPoolWithCLoopConsumer(t *testing.T) {
	const producers, per, workers = 4, 5000, 8
	c := newChan(t, eventq.WithCapacity(64))
	loop := ctest.StartConsumer(c.CloneC(), producers, 0)
	totalCThreads.Add(1)
	tr := newTracker(producers, per)
	errs := make(chan error, producers+workers)
	var poolDone sync.WaitGroup
	for i := range workers {
		poolDone.Add(1)
		go func() {
			defer poolDone.Done()
			errs <- stormRecv(c, tr.consumer(), uint64(i))
		}()
	}
	goN(producers, func(p int) { errs <- stormSend(c, uint32(p), per, uint64(p)) })
	if !waitUntil(func() bool { st, _ := c.Stats(); return st.Received == producers*per }) {
		hung(t, "C loop and Go pool", "messages still queued", c)
	}
	c.Close()
	poolDone.Wait()
	res := loop.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, e := range tr.errs {
		t.Error(e)
	}
	if res.Bad != 0 || res.EOF != 1 || res.RC != 0 {
		t.Errorf("C loop consumer: %+v", res)
	}
	if got := uint64(tr.received.Load()) + res.Received; got != producers*per {
		t.Errorf("received %d (Go %d, C %d), want %d", got, tr.received.Load(), res.Received, producers*per)
	}
	if tr.received.Load() == 0 || res.Received == 0 {
		t.Logf("one side took everything: Go %d, C %d", tr.received.Load(), res.Received)
	}
	totalMessages.Add(producers * per)
}

// A process-shared channel fed by a child process (two goroutines there),
// received by a pool of 16 goroutines here in a cancellation storm.
func TestPoolSharedReceivers(t *testing.T) {
	const per = 3000
	ctx := watchdog(t)
	rx := newSharedChan(t, eventq.SideRecv, eventq.WithCapacity(16))
	c, mine := startWithSocket(t, testCmd(ctx, fmt.Sprintf("send socket %d close", per)))
	if err := rx.SendTo(mine); err != nil {
		t.Fatal(err)
	}
	tr := newTracker(2, per)
	errs := make(chan error, 16)
	goN(16, func(i int) { errs <- stormRecv(rx, tr.consumer(), uint64(i)) })
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	tr.verify(t)
	c.wait(t)
	totalMessages.Add(2 * per)
}

// poolChildEnv is the role of TestPoolChild.
const poolChildEnv = "EVENTQ_POOL_CHILD"

// TestPoolChild is not a test: with EVENTQ_POOL_CHILD="drain PRODUCERS PER"
// it is the receiving process of TestPoolSharedSenders: it takes its end
// from EVENTQ_TEST_CHAN, receives with two goroutines until end of stream,
// checks D1-D3 and says "ok".
func TestPoolChild(t *testing.T) {
	args := strings.Fields(os.Getenv(poolChildEnv))
	if len(args) != 3 || args[0] != "drain" {
		return
	}
	producers, _ := strconv.Atoi(args[1])
	per, _ := strconv.Atoi(args[2])
	ch, err := eventq.ImportEnv(chanEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	tr := newTracker(producers, uint64(per))
	goN(2, func(i int) {
		if err := consume(context.Background(), ch, tr.consumer(), 8*i); err != nil {
			tr.fail("%v", err)
		}
	})
	tr.verify(t)
	if t.Failed() {
		os.Exit(1)
	}
	fmt.Println("ok")
	os.Exit(0)
}

// A pool of 16 goroutines sending on a process-shared channel of 8 slots,
// blocked on it full most of the time and their calls cancelled as in the
// storm, to a child that drains it: every message arrives once and in
// order.
func TestPoolSharedSenders(t *testing.T) {
	const producers, per = 16, 300
	ctx := watchdog(t)
	tx := newSharedChan(t, eventq.SideSend, eventq.WithCapacity(8))
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPoolChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=drain %d %d", poolChildEnv, producers, per))
	c := startWithEnd(t, tx, cmd)
	errs := make(chan error, producers)
	goN(producers, func(p int) { errs <- stormSend(tx, uint32(p), per, uint64(p)) })
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	tx.Close()
	c.expect(t, "ok")
	c.wait(t)
	totalMessages.Add(producers * per)
}
