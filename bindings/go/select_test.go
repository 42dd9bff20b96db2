// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// selectParked returns a channel that receives once per time RecvAny is
// about to park.
func selectParked(t *testing.T) <-chan struct{} {
	parked := make(chan struct{}, 1024)
	eventq.SetSelectParkHook(func() { parked <- struct{}{} })
	t.Cleanup(func() { eventq.SetSelectParkHook(nil) })
	return parked
}

type anyResult struct {
	i   int
	msg []byte
	err error
}

func goRecvAny(ctx context.Context, chans ...*eventq.Chan) <-chan anyResult {
	res := make(chan anyResult, 1)
	go func() {
		i, m, err := eventq.RecvAny(ctx, chans...)
		res <- anyResult{i, m, err}
	}()
	return res
}

func TestRecvAny(t *testing.T) {
	bg := context.Background()
	a, b := newChan(t), newChan(t)
	parked := selectParked(t)

	if i, _, err := eventq.RecvAny(bg); i != -1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("no channels: %d %v", i, err)
	}
	if i, _, err := eventq.RecvAny(bg, a, nil); i != 1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a nil channel: %d %v", i, err)
	}

	// A message queued: taken at once, from the channel that has it.
	b.TrySend([]byte("b1"))
	if i, m, err := eventq.RecvAny(bg, a, b); i != 1 || string(m) != "b1" || err != nil {
		t.Fatalf("ready: %d %q %v", i, m, err)
	}
	// A done ctx does not stop a RecvAny that finds a message at once.
	done, cancel := context.WithCancel(bg)
	cancel()
	a.TrySend([]byte("a1"))
	if i, m, err := eventq.RecvAny(done, a, b); i != 0 || string(m) != "a1" || err != nil {
		t.Fatalf("ready, done ctx: %d %q %v", i, m, err)
	}
	if i, _, err := eventq.RecvAny(done, a, b); i != -1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("empty, done ctx: %d %v", i, err)
	}

	// Parked, then a send to the second channel wakes it.
	res := goRecvAny(bg, a, b)
	<-parked
	b.TrySend([]byte("b2"))
	if r := <-res; r.i != 1 || string(r.msg) != "b2" || r.err != nil {
		t.Fatalf("woken by a send: %+v", r)
	}

	// Parked, then cancelled: nothing taken; a later receive gets what
	// came after.
	ctx, cancel := context.WithCancel(bg)
	res = goRecvAny(ctx, a, b)
	<-parked
	cancel()
	if r := <-res; r.i != -1 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled: %+v", r)
	}
	a.TrySend([]byte("a2"))
	if m, err := a.TryRecv(); string(m) != "a2" || err != nil {
		t.Fatalf("after a cancelled RecvAny: %q %v", m, err)
	}

	// Two handles of one channel (one fd) in one set.
	a2, err := a.Clone()
	if err != nil {
		t.Fatal(err)
	}
	res = goRecvAny(bg, a, a2, b)
	<-parked
	a.TrySend([]byte("a3"))
	if r := <-res; (r.i != 0 && r.i != 1) || string(r.msg) != "a3" || r.err != nil {
		t.Fatalf("clones in one set: %+v", r)
	}

	// Parked, then one channel's handle is released: its index, ErrReleased.
	res = goRecvAny(bg, a, a2, b)
	<-parked
	a2.Release()
	if r := <-res; r.i != 1 || !errors.Is(r.err, eventq.ErrReleased) {
		t.Fatalf("released while parked: %+v", r)
	}
	if i, _, err := eventq.RecvAny(bg, b, a2); i != 1 || !errors.Is(err, eventq.ErrReleased) {
		t.Fatalf("a released channel: %d %v", i, err)
	}

	// Closed and drained: ready, with its index; parked, a close wakes it.
	res = goRecvAny(bg, a, b)
	<-parked
	b.Close()
	if r := <-res; r.i != 1 || !errors.Is(r.err, eventq.ErrClosed) {
		t.Fatalf("woken by a close: %+v", r)
	}
	a.TrySend([]byte("a4"))
	got := map[int]int{}
	for range 2 {
		i, m, err := eventq.RecvAny(bg, a, b)
		if err == nil && string(m) != "a4" {
			t.Fatalf("unexpected %q", m)
		}
		got[i]++
	}
	if got[0] != 1 || got[1] != 1 {
		t.Fatalf("a message and an end of stream, one each: %v", got)
	}

	// Turns: two busy channels are served alike.
	c1, c2 := newChan(t), newChan(t)
	for range 50 {
		c1.TrySend([]byte("1"))
		c2.TrySend([]byte("2"))
	}
	got = map[int]int{}
	for range 50 {
		i, _, err := eventq.RecvAny(bg, c1, c2)
		if err != nil {
			t.Fatal(err)
		}
		got[i]++
	}
	if got[0] < 20 || got[1] < 20 {
		t.Fatalf("one channel starved the other: %v", got)
	}
}

// Several producers into three channels; a first consumer stops mid-way
// (a producer cancels its ctx a third of the way, whether it is parked in
// RecvAny or not), and a later one receives the rest: every message exactly
// once, in each producer's order. 4 rounds at GOMAXPROCS 1, 4 and 16.
func TestRecvAnyStopsMidway(t *testing.T) {
	const chans, producersPer, per, rounds = 3, 4, 500, 4
	const producers = chans * producersPer
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for n := range 3 * rounds {
		procs := []int{1, 4, 16}[n/rounds]
		runtime.GOMAXPROCS(procs)
		func() {
			cs := make([]*eventq.Chan, chans)
			for k := range cs {
				cs[k] = newChan(t, eventq.WithCapacity(16))
			}
			tr := newTracker(producers, per)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				var wg sync.WaitGroup
				for k, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						goN(producersPer, func(j int) {
							p := k*producersPer + j
							for seq := uint64(0); seq < per; seq++ {
								if p == 0 && seq == per/3 {
									cancel()
								}
								if err := c.Send(context.Background(), makeMsg(uint32(p), seq)); err != nil {
									t.Error(err)
									return
								}
							}
						})
						c.Close()
					}()
				}
				wg.Wait()
			}()

			var first atomic.Int64
			v := tr.consumer()
			set := slices.Clone(cs)
			for len(set) > 0 && ctx.Err() == nil {
				i, m, err := eventq.RecvAny(ctx, set...)
				if errors.Is(err, eventq.ErrClosed) {
					set = slices.Delete(set, i, i+1)
					continue
				}
				if errors.Is(err, context.Canceled) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				v.add(m)
				first.Add(1)
			}
			// A later consumer gets the rest.
			v = tr.consumer()
			for len(set) > 0 {
				i, m, err := eventq.RecvAny(context.Background(), set...)
				if errors.Is(err, eventq.ErrClosed) {
					set = slices.Delete(set, i, i+1)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				v.add(m)
			}
			tr.verify(t)
			if first.Load() == 0 || first.Load() == producers*per {
				t.Fatalf("the first consumer took %d of %d", first.Load(), producers*per)
			}
			t.Logf("GOMAXPROCS=%d: the first consumer took %d, the later one %d",
				procs, first.Load(), producers*per-first.Load())
		}()
	}
	totalMessages.Add(3 * rounds * producers * per)
}
