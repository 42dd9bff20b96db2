// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Selector: many channels, built once, waited on many times.

func newSelector(t *testing.T, chans ...*eventq.Chan) *eventq.Selector {
	t.Helper()
	s, err := eventq.NewSelector(chans...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func chans(t *testing.T, n int, opts ...eventq.Option) []*eventq.Chan {
	t.Helper()
	cs := make([]*eventq.Chan, n)
	for i := range cs {
		cs[i] = newChan(t, opts...)
	}
	return cs
}

// selectorParked returns a channel that receives once per time a Recv on
// a Selector (or RecvAny) is about to wait.
func selectorParked(t *testing.T) <-chan struct{} {
	parked := make(chan struct{}, 1024)
	eventq.SetSelectParkHook(func() { parked <- struct{}{} })
	t.Cleanup(func() { eventq.SetSelectParkHook(nil) })
	return parked
}

func TestSelectorBasics(t *testing.T) {
	ctx := context.Background()
	cs := chans(t, 3)
	s := newSelector(t, cs...)
	if s.Len() != 3 {
		t.Fatalf("Len %d", s.Len())
	}
	cs[1].TrySend([]byte("b"))
	if c, m, err := s.Recv(ctx); err != nil || c != cs[1] || string(m) != "b" {
		t.Fatalf("Recv: %p %q %v, want %p", c, m, err, cs[1])
	}
	if err := s.Add(cs[0]); err != nil || s.Len() != 3 {
		t.Fatalf("Add of a member: %v, Len %d", err, s.Len())
	}
	if err := s.Add(nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Add(nil): %v", err)
	}
	if err := s.Remove(cs[1]); err != nil || s.Len() != 2 {
		t.Fatalf("Remove: %v, Len %d", err, s.Len())
	}
	if err := s.Remove(cs[1]); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Remove of a non-member: %v", err)
	}
	// A removed channel is not received from; its messages stay queued.
	cs[1].TrySend([]byte("kept"))
	expired, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if c, _, err := s.Recv(expired); !errors.Is(err, context.DeadlineExceeded) || c != nil {
		t.Fatalf("Recv with only a removed channel ready: %p %v", c, err)
	}
	if m, err := cs[1].TryRecv(); err != nil || string(m) != "kept" {
		t.Fatalf("the removed channel's message: %q %v", m, err)
	}
	// RecvInto: a buffer too small leaves the message queued.
	cs[2].TrySend([]byte("0123456789"))
	var tooSmall *eventq.BufferTooSmallError
	if c, _, err := s.RecvInto(ctx, make([]byte, 4)); !errors.As(err, &tooSmall) || tooSmall.Needed != 10 || c != cs[2] {
		t.Fatalf("RecvInto, small buffer: %p %v", c, err)
	}
	buf := make([]byte, 16)
	if c, n, err := s.RecvInto(ctx, buf); err != nil || c != cs[2] || string(buf[:n]) != "0123456789" {
		t.Fatalf("RecvInto: %p %q %v", c, buf[:n], err)
	}
	// Close: later calls fail; the channels are not closed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Recv(ctx); !errors.Is(err, eventq.ErrSelectorClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, eventq.ErrSelectorClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Add(cs[0]); !errors.Is(err, eventq.ErrSelectorClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if err := cs[0].TrySend([]byte("open")); err != nil {
		t.Fatalf("a member after Close: %v", err)
	}
}

// Recv takes exactly one message, and a Recv ended by its context takes
// none: everything else stays queued.
func TestSelectorLossless(t *testing.T) {
	cs := chans(t, 8)
	s := newSelector(t, cs...)
	for i, c := range cs {
		c.TrySend([]byte{byte(i)})
		c.TrySend([]byte{byte(i)})
	}
	c, m, err := s.Recv(context.Background())
	if err != nil || len(m) != 1 || cs[m[0]] != c {
		t.Fatalf("Recv: %v %v", m, err)
	}
	total := 0
	for _, c := range cs {
		st, _ := c.Stats()
		total += int(st.Pending)
	}
	if total != 15 {
		t.Fatalf("%d messages queued after one Recv, want 15", total)
	}
	for range 15 {
		if _, _, err := s.Recv(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Cancelled while waiting, many times over: nothing is taken.
	parked := selectorParked(t)
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, _, err := s.Recv(ctx); errc <- err }()
		<-parked
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Recv: %v", err)
		}
	}
	cs[5].TrySend([]byte("after"))
	if c, m, err := s.Recv(context.Background()); err != nil || c != cs[5] || string(m) != "after" {
		t.Fatalf("Recv after cancellations: %q %v", m, err)
	}
	// A done context does not stop a Recv that finds a message.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	cs[3].TrySend([]byte("ready"))
	if c, m, err := s.Recv(done); err != nil || c != cs[3] || string(m) != "ready" {
		t.Fatalf("Recv with a done ctx and a message: %q %v", m, err)
	}
}

// A member that always has messages does not starve the others: each of
// them is served within a turn of the ready members.
func TestSelectorFairness(t *testing.T) {
	for _, n := range []int{5, 300} {
		cs := chans(t, n, eventq.WithCapacity(4096))
		s := newSelector(t, cs...)
		for range 3000 {
			cs[0].TrySend([]byte("busy"))
		}
		for _, c := range cs[1:] {
			c.TrySend([]byte("once"))
		}
		served := map[*eventq.Chan]bool{}
		for i := 0; i < 2*n; i++ {
			c, _, err := s.Recv(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			served[c] = true
		}
		if len(served) != n {
			t.Fatalf("%d members: %d served in %d Recvs", n, len(served), 2*n)
		}
	}
}

// A closed and drained member is ready with ErrClosed, each time, until
// it is removed; its queued messages come first.
func TestSelectorClosedMember(t *testing.T) {
	cs := chans(t, 2)
	s := newSelector(t, cs...)
	cs[0].TrySend([]byte("last"))
	cs[0].Close()
	if c, m, err := s.Recv(context.Background()); err != nil || c != cs[0] || string(m) != "last" {
		t.Fatalf("Recv: %q %v", m, err)
	}
	for range 3 {
		if c, _, err := s.Recv(context.Background()); !errors.Is(err, eventq.ErrClosed) || c != cs[0] {
			t.Fatalf("Recv of a closed member: %p %v", c, err)
		}
	}
	s.Remove(cs[0])
	cs[1].TrySend([]byte("b"))
	if c, m, err := s.Recv(context.Background()); err != nil || c != cs[1] || string(m) != "b" {
		t.Fatalf("Recv after Remove: %q %v", m, err)
	}
}

// Releasing a member's handle wakes the goroutines waiting on the
// Selector, which report it with ErrReleased until it is removed; the
// Selector's reference keeps the C handle until then.
func TestSelectorReleasedMember(t *testing.T) {
	a, err := eventq.NewChan()
	if err != nil {
		t.Fatal(err)
	}
	b := newChan(t)
	s := newSelector(t, a, b)
	parked := selectorParked(t)
	const waiters = 4
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			c, _, err := s.Recv(context.Background())
			if c != a {
				err = fmt.Errorf("member %p: %w", c, err)
			}
			errs <- err
		}()
	}
	for range waiters {
		<-parked
	}
	live := eventq.LiveChans()
	a.Release()
	for range waiters {
		if err := <-errs; !errors.Is(err, eventq.ErrReleased) {
			t.Errorf("waiter: %v", err)
		}
	}
	if eventq.LiveChans() != live {
		t.Errorf("the released member was freed while in the Selector")
	}
	if err := s.Remove(a); err != nil {
		t.Fatal(err)
	}
	if eventq.LiveChans() != live-1 {
		t.Errorf("the released member was not freed when removed")
	}
	b.TrySend([]byte("b"))
	if c, m, err := s.Recv(context.Background()); err != nil || c != b || string(m) != "b" {
		t.Fatalf("Recv after: %q %v", m, err)
	}
	if err := s.Add(a); !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("Add of a released handle: %v", err)
	}
}

// A member added while goroutines wait, with messages queued, wakes one;
// two handles of one channel are one member.
func TestSelectorAddWhileWaiting(t *testing.T) {
	s := newSelector(t)
	parked := selectorParked(t)
	errc := make(chan error, 1)
	c := newChan(t)
	go func() {
		got, m, err := s.Recv(context.Background())
		if err == nil && (got != c || string(m) != "x") {
			err = fmt.Errorf("got %q from %p", m, got)
		}
		errc <- err
	}()
	<-parked
	c.TrySend([]byte("x"))
	if err := s.Add(c); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	clone, err := c.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer clone.Release()
	if err := s.Add(clone); err != nil || s.Len() != 2 {
		t.Fatalf("Add of a clone: %v, Len %d", err, s.Len())
	}
	clone.TrySend([]byte("y"))
	if got, _, err := s.Recv(context.Background()); err != nil || got != c {
		t.Fatalf("Recv through two handles: %p %v, want the first added", got, err)
	}
	s.Remove(c)
	clone.TrySend([]byte("z"))
	if got, _, err := s.Recv(context.Background()); err != nil || got != clone {
		t.Fatalf("Recv through the clone: %p %v", got, err)
	}
}

// Close wakes every goroutine waiting on the Selector.
func TestSelectorCloseWakesWaiters(t *testing.T) {
	s, err := eventq.NewSelector(chans(t, 3)...)
	if err != nil {
		t.Fatal(err)
	}
	parked := selectorParked(t)
	const waiters = 8
	errs := make(chan error, waiters)
	for range waiters {
		go func() { _, _, err := s.Recv(context.Background()); errs <- err }()
	}
	for range waiters {
		<-parked
	}
	s.Close()
	for range waiters {
		if err := <-errs; !errors.Is(err, eventq.ErrSelectorClosed) {
			t.Errorf("waiter: %v", err)
		}
	}
}

// One wake per message with several goroutines on one Selector: paced
// messages on random members of 64 reach 8 waiting goroutines, one
// goroutine waking for each, with about one receive attempt each (a cgo
// call; so is each send), at most three (see TestPoolAttemptsPerMessage).
func TestSelectorAttemptsPerMessage(t *testing.T) {
	const members, workers, rounds = 64, 8, 100
	cs := chans(t, members)
	s := newSelector(t, cs...)
	parked := selectorParked(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{})
	for range workers {
		go func() {
			for {
				if _, _, err := s.Recv(ctx); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	for range workers {
		<-parked
	}
	rng := rand.New(rand.NewPCG(1, 2))
	round := func() {
		time.Sleep(500 * time.Microsecond)
		cs[rng.IntN(members)].TrySend([]byte("0123456789abcdef"))
		<-got
	}
	for range 8 {
		round()
	}
	for len(parked) > 0 {
		<-parked
	}
	cgo0 := runtime.NumCgoCall()
	for range rounds {
		round()
	}
	attempts := float64(runtime.NumCgoCall()-cgo0-rounds) / rounds
	waits := float64(len(parked)) / rounds
	t.Logf("%.2f receive attempts, %.2f waits per message", attempts, waits)
	if waits > 1.5 {
		t.Errorf("%.2f waits per message, want 1", waits)
	}
	if attempts > 3 {
		t.Errorf("%.2f receive attempts per message, want 1 to 3", attempts)
	}
	totalMessages.Add(rounds + 8)
}

// Many goroutines on one Selector of 64 channels, in a cancellation storm,
// while 8 goroutines send on all of them (each on 8 members, one at random
// each time): every message arrives once, and in order per channel, and
// all arrive while the receivers still wait; then every closed member is
// reported. At GOMAXPROCS 1, 2, 4, 16.
func TestSelectorStorm(t *testing.T) {
	const members, senders, per, receivers = 64, 8, 60, 12
	eachGOMAXPROCS(t, 8, func(name string) bool {
		cs := make([]*eventq.Chan, members)
		for i := range cs {
			c, err := eventq.NewChan(eventq.WithCapacity(4))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			cs[i] = c
		}
		s, err := eventq.NewSelector(cs...)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		tr := newTracker(members, per) // a producer per channel
		var closed atomic.Int64
		errs := make(chan error, senders+receivers)
		var recvDone sync.WaitGroup
		for i := range receivers {
			recvDone.Add(1)
			go func() {
				defer recvDone.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				buf := make([]byte, 128)
				v := tr.consumer()
				for {
					ctx, cancel := stormCtx(rng)
					var c *eventq.Chan
					var m []byte
					var err error
					if rng.IntN(2) == 0 {
						c, m, err = s.Recv(ctx)
					} else {
						var n int
						c, n, err = s.RecvInto(ctx, buf)
						m = append([]byte(nil), buf[:n]...)
					}
					cancel()
					switch {
					case err == nil:
						v.add(m)
					case errors.Is(err, eventq.ErrClosed):
						if s.Remove(c) == nil {
							closed.Add(1)
						}
					case errors.Is(err, eventq.ErrSelectorClosed):
						errs <- nil
						return
					case ctx.Err() == nil:
						errs <- err
						return
					}
				}
			}()
		}
		goN(senders, func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			var next [members / senders]uint64
			for left := per * members / senders; left > 0; {
				k := rng.IntN(members / senders)
				if next[k] == per {
					continue
				}
				p := g + senders*k
				if err := cs[p].Send(context.Background(), makeMsg(uint32(p), next[k])); err != nil {
					errs <- err
					return
				}
				next[k]++
				left--
			}
		})
		totalGoroutines.Add(receivers)
		ok := waitUntil(func() bool { return tr.received.Load() == members*per })
		if !ok {
			hung(t, name, fmt.Sprintf("%d of %d messages received", tr.received.Load(), members*per), cs[0])
		}
		for _, c := range cs {
			c.Close()
		}
		if ok && !waitUntil(func() bool { return closed.Load() == members }) {
			t.Errorf("%s: %d of %d closed members seen", name, closed.Load(), members)
		}
		s.Close()
		recvDone.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		tr.verify(t)
		totalMessages.Add(members * per)
		return ok && !t.Failed()
	})
}

// 2,000 channels in one Selector.
func TestSelectorManyChannels(t *testing.T) {
	const n = 2000
	cs := chans(t, n, eventq.WithCapacity(4))
	s := newSelector(t, cs...)
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 200 {
		i := rng.IntN(n)
		cs[i].TrySend([]byte{byte(round)})
		c, m, err := s.Recv(context.Background())
		if err != nil || c != cs[i] || m[0] != byte(round) {
			t.Fatalf("round %d: %p %v %v, want member %d", round, c, m, err, i)
		}
	}
}

// The sending end of a process-shared channel cannot be a member.
func TestSelectorWrongSide(t *testing.T) {
	tx, _ := sharedPair(t, eventq.SideSend)
	s := newSelector(t)
	if err := s.Add(tx); !errors.Is(err, eventq.ErrWrongSide) {
		t.Fatalf("Add of a sending end: %v", err)
	}
}

// A shared channel's receiving end is a member like any: its receive fd
// is an epoll fd, which nests in the Selector's.
func TestSelectorSharedMember(t *testing.T) {
	rx, tx := sharedPair(t, eventq.SideRecv)
	local := newChan(t)
	s := newSelector(t, rx, local)
	parked := selectorParked(t)
	got := make(chan *eventq.Chan, 1)
	go func() {
		c, _, err := s.Recv(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	<-parked
	if err := tx.TrySend([]byte("across")); err != nil {
		t.Fatal(err)
	}
	if c := <-got; c != rx {
		t.Fatalf("Recv: %p, want the shared end", c)
	}
}

// A forgotten Selector and its forgotten members are freed by their
// finalizers, as a forgotten Chan is.
func TestSelectorFinalizer(t *testing.T) {
	before := eventq.LiveChans()
	func() {
		var cs []*eventq.Chan
		for range 5 {
			c, err := eventq.NewChan()
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		if _, err := eventq.NewSelector(cs...); err != nil {
			t.Fatal(err)
		}
	}()
	for i := 0; i < 100 && eventq.LiveChans() > before; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := eventq.LiveChans() - before; n > 0 {
		t.Fatalf("%d handles still live after GC", n)
	}
}

// A forgotten Chan on which goroutines have waited (its queue holds a dup
// of the receive fd) is freed by its finalizer too.
func TestWaitedChanFinalizer(t *testing.T) {
	before := eventq.LiveChans()
	func() {
		c, err := eventq.NewChan()
		if err != nil {
			t.Fatal(err)
		}
		parked := make(chan struct{}, 16)
		eventq.SetParkHook(c, func(bool) { parked <- struct{}{} })
		defer eventq.SetParkHook(c, nil)
		done := make(chan struct{})
		for range 3 {
			go func() {
				c.Recv(context.Background())
				done <- struct{}{}
			}()
		}
		for range 3 {
			<-parked
		}
		for range 3 {
			c.TrySend([]byte("x"))
		}
		for range 3 {
			<-done
		}
	}()
	for i := 0; i < 100 && eventq.LiveChans() > before; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := eventq.LiveChans() - before; n > 0 {
		t.Fatalf("%d handles still live after GC", n)
	}
}
