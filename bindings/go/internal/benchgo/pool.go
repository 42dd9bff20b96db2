// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Worker pools: 1, 8 and 64 goroutines receiving from one channel (and
// sending to one), as every Go worker pool does.
//
//   - paced: the producer sends one message, waits until a worker has it,
//     pauses 50 µs (the pool falls idle: its goroutines asleep, the
//     netpoller blocked in the kernel), and sends the next. Reported: the
//     latency from the send to the producer learning of the receipt (p50,
//     p99, ns), and the receive attempts per message: every receive
//     attempt is one cgo call (16-byte messages), as is each send, so the
//     attempts are the run's cgo calls (runtime.NumCgoCall) less one per
//     message. One attempt per message means one goroutine woke for it.
//   - burst: one producer Sends as fast as it can into a channel of 1024
//     (the seed's burst); the workers Recv; throughput.
//   - bursts at idle: bursts of 256 messages arrive at an idle pool: the
//     producer Sends them as fast as it can, waits until the workers have
//     received them all (by then they wait again), and sends the next;
//     throughput. Reported, not a target: each burst wakes one waiting
//     worker per message, up to all of them, as a Go channel does, which
//     costs a goroutine switch per worker when the work is nil.
//   - senders: 1, 8 or 64 goroutines Send into a channel of 64 (low water
//     32), blocked on it full most of the time, while one consumer drains
//     it with RecvBatchInto; throughput.
func init() {
	var rs []Row
	for _, n := range []int{1, 8, 64} {
		rs = append(rs, Row{Group: "pool", Name: pacedName(n), Unit: "msg",
			Run: func(min time.Duration) Result { return poolPaced(min, n) }})
	}
	for _, n := range []int{1, 8, 64} {
		rs = append(rs, Row{Group: "pool", Name: burstName(n), Unit: "msg",
			Run: func(min time.Duration) Result { return poolBurst(min, n) }})
	}
	for _, n := range []int{1, 8, 64} {
		rs = append(rs, Row{Group: "pool", Name: burstsName(n), Unit: "msg",
			Run: func(min time.Duration) Result { return poolBursts(min, n) }})
	}
	for _, n := range []int{1, 8, 64} {
		rs = append(rs, Row{Group: "pool", Name: sendersName(n), Unit: "msg",
			Run: func(min time.Duration) Result { return poolSenders(min, n) }})
	}
	Register(rs, []Target{
		{Group: "pool", Name: "paced, 8 receivers: receive attempts per message",
			Value: Metric(pacedName(8), "attempts/msg"), Cmp: "<=", Goal: 1.5, Unit: "attempts/msg"},
		{Group: "pool", Name: "paced, 64 receivers: receive attempts per message",
			Value: Metric(pacedName(64), "attempts/msg"), Cmp: "<=", Goal: 1.5, Unit: "attempts/msg"},
		{Group: "pool", Name: "paced p99 latency, 8 receivers over 1",
			Value: MetricRatio(pacedName(8), pacedName(1), "p99-ns"), Cmp: "<=", Goal: 2, Unit: "x"},
		{Group: "pool", Name: "paced p99 latency, 64 receivers over 1",
			Value: MetricRatio(pacedName(64), pacedName(1), "p99-ns"), Cmp: "<=", Goal: 2, Unit: "x"},
		{Group: "pool", Name: "burst throughput, 64 receivers over 1",
			Value: Ratio(burstName(64), burstName(1)), Cmp: ">=", Goal: 1, Unit: "x"},
	})
}

func pacedName(n int) string { return fmt.Sprintf("paced, %s, Recv", goroutines(n, "receiving")) }
func burstName(n int) string { return fmt.Sprintf("burst, %s, Recv", goroutines(n, "receiving")) }
func burstsName(n int) string {
	return fmt.Sprintf("bursts of 256 at idle, %s, Recv", goroutines(n, "receiving"))
}
func sendersName(n int) string {
	return fmt.Sprintf("%s blocked on full (cap 64), Send", goroutines(n, "sending"))
}

// goroutines says "1 receiving goroutine", "8 receiving goroutines".
func goroutines(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s goroutine", what)
	}
	return fmt.Sprintf("%d %s goroutines", n, what)
}

// pacedGap is the pause between two paced messages.
const pacedGap = 50 * time.Microsecond

// burstLen is the messages of one burst.
const burstLen = 256

func poolPaced(min time.Duration, workers int) Result {
	c, err := eventq.NewChan(eventq.WithCapacity(1024))
	if err != nil {
		panic(err)
	}
	defer c.Release()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Recv(ctx); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	round := func() time.Duration {
		time.Sleep(pacedGap)
		t0 := time.Now()
		if err := c.TrySend(msg16); err != nil {
			panic(err)
		}
		<-got
		return time.Since(t0)
	}
	for range 64 { // every worker has waited once
		round()
	}
	var lat []time.Duration
	start := time.Now()
	cgo0 := runtime.NumCgoCall()
	for time.Since(start) < min {
		lat = append(lat, round())
	}
	cgo := runtime.NumCgoCall() - cgo0
	el := time.Since(start)
	cancel()
	wg.Wait()
	n := float64(len(lat))
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Result{Ops: n, Elapsed: el, Metrics: map[string]float64{
		"p50-ns":       float64(lat[len(lat)/2]),
		"p99-ns":       float64(lat[len(lat)*99/100]),
		"attempts/msg": (float64(cgo) - n) / n,
	}}
}

func poolBurst(min time.Duration, workers int) Result {
	ctx := context.Background()
	c, err := eventq.NewChan(eventq.WithCapacity(1024))
	if err != nil {
		panic(err)
	}
	defer c.Release()
	start := time.Now()
	var sent atomic.Int64
	go func() {
		for time.Since(start) < min {
			for range chunk {
				if err := c.Send(ctx, msg16); err != nil {
					panic(err)
				}
			}
			sent.Add(chunk)
		}
		c.Close()
	}()
	var got atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for {
				if _, err := c.Recv(ctx); err != nil {
					if !errors.Is(err, eventq.ErrClosed) {
						panic(err)
					}
					break
				}
				n++
			}
			got.Add(n)
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if got.Load() != sent.Load() {
		panic("benchgo: pool lost messages")
	}
	return Result{Ops: float64(got.Load()), Elapsed: el}
}

func poolBursts(min time.Duration, workers int) Result {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := eventq.NewChan(eventq.WithCapacity(1024))
	if err != nil {
		panic(err)
	}
	defer c.Release()
	var left atomic.Int64 // messages of the burst not yet received
	burstDone := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Recv(ctx); err != nil {
					return
				}
				if left.Add(-1) == 0 {
					burstDone <- struct{}{}
				}
			}
		}()
	}
	var got float64
	burst := func() {
		left.Store(burstLen)
		for range burstLen {
			if err := c.Send(ctx, msg16); err != nil {
				panic(err)
			}
		}
		<-burstDone
		got += burstLen
	}
	for range 4 {
		burst()
	}
	got = 0
	start := time.Now()
	for time.Since(start) < min {
		burst()
	}
	el := time.Since(start)
	cancel()
	wg.Wait()
	return Result{Ops: got, Elapsed: el}
}

func poolSenders(min time.Duration, senders int) Result {
	ctx := context.Background()
	c, err := eventq.NewChan(eventq.WithCapacity(64))
	if err != nil {
		panic(err)
	}
	defer c.Release()
	start := time.Now()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for time.Since(start) < min {
				for range chunk / 16 {
					if err := c.Send(ctx, msg16); err != nil {
						panic(err)
					}
				}
				n += chunk / 16
			}
			sent.Add(n)
		}()
	}
	go func() {
		wg.Wait()
		c.Close()
	}()
	buf := make([]byte, 64*16)
	lens := make([]int, 64)
	var got int64
	for {
		n, err := c.RecvBatchInto(ctx, buf, lens)
		if err != nil {
			if !errors.Is(err, eventq.ErrClosed) {
				panic(err)
			}
			break
		}
		got += int64(n)
	}
	el := time.Since(start)
	if got != sent.Load() {
		panic("benchgo: senders lost messages")
	}
	return Result{Ops: float64(got), Elapsed: el}
}
