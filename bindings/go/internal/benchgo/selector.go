// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Select: a round trip through one receiving goroutine that waits on n
// channels at once. Each round the producer pauses 50 µs (the receiver is
// waiting by then, in the netpoller), sends one message on a member chosen
// at random, and waits until the receiver has it: the latency of that
// (p50, p99, ns; the round trip). Against the same round trip through one
// channel's Recv; RecvAny, which builds its epoll set at each wait, for
// comparison. The throughput column counts the pauses: read the latencies.
func init() {
	rs := []Row{{Group: "select", Name: selRecvName, Unit: "round", Run: func(min time.Duration) Result {
		return roundTrip(min, 1, recvOne)
	}}}
	for _, n := range []int{1, 64, 2000} {
		rs = append(rs, Row{Group: "select", Name: selName(n), Unit: "round",
			Run: func(min time.Duration) Result { return roundTrip(min, n, recvSelector) }})
	}
	for _, n := range []int{64, 2000} {
		rs = append(rs, Row{Group: "select", Name: anyName(n), Unit: "round",
			Run: func(min time.Duration) Result { return roundTrip(min, n, recvAny) }})
	}
	Register(rs, []Target{
		{Group: "select", Name: "Selector round trip (p50), 64 channels over one Chan.Recv",
			Value: MetricRatio(selName(64), selRecvName, "p50-ns"), Cmp: "<=", Goal: 2, Unit: "x"},
		{Group: "select", Name: "Selector round trip (p50), 2,000 channels over one Chan.Recv",
			Value: MetricRatio(selName(2000), selRecvName, "p50-ns"), Cmp: "<=", Goal: 5, Unit: "x"},
	})
}

const selRecvName = "round trip, 1 channel, Chan.Recv"

func selName(n int) string { return fmt.Sprintf("round trip, %s, Selector.Recv", channels(n)) }
func anyName(n int) string { return fmt.Sprintf("round trip, %s, RecvAny", channels(n)) }

// channels says "1 channel", "64 channels", "2,000 channels".
func channels(n int) string {
	switch {
	case n == 1:
		return "1 channel"
	case n >= 1000:
		return fmt.Sprintf("%d,%03d channels", n/1000, n%1000)
	}
	return fmt.Sprintf("%d channels", n)
}

// A receiver: it receives one message from any of chans, and is made once
// per run (a Selector is built there).
type receiver func(chans []*eventq.Chan) (recv func(context.Context) error, done func())

func recvOne(chans []*eventq.Chan) (func(context.Context) error, func()) {
	c := chans[0]
	return func(ctx context.Context) error { _, err := c.Recv(ctx); return err }, func() {}
}

func recvSelector(chans []*eventq.Chan) (func(context.Context) error, func()) {
	sel, err := eventq.NewSelector(chans...)
	if err != nil {
		panic(err)
	}
	return func(ctx context.Context) error { _, _, err := sel.Recv(ctx); return err }, func() { sel.Close() }
}

func recvAny(chans []*eventq.Chan) (func(context.Context) error, func()) {
	return func(ctx context.Context) error { _, _, err := eventq.RecvAny(ctx, chans...); return err }, func() {}
}

func roundTrip(min time.Duration, n int, mk receiver) Result {
	chans := make([]*eventq.Chan, n)
	for i := range chans {
		c, err := eventq.NewChan(eventq.WithCapacity(16))
		if err != nil {
			panic(err)
		}
		defer c.Release()
		chans[i] = c
	}
	recv, done := mk(chans)
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{})
	end := make(chan struct{})
	go func() {
		defer close(end)
		for recv(ctx) == nil {
			got <- struct{}{}
		}
	}()
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	round := func() time.Duration {
		c := chans[rng.IntN(n)]
		time.Sleep(pacedGap)
		t0 := time.Now()
		if err := c.TrySend(msg16); err != nil {
			panic(err)
		}
		<-got
		return time.Since(t0)
	}
	for range 16 {
		round()
	}
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < min {
		lat = append(lat, round())
	}
	el := time.Since(start)
	cancel()
	<-end
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Result{Ops: float64(len(lat)), Elapsed: el, Metrics: map[string]float64{
		"p50-ns": float64(lat[len(lat)/2]),
		"p99-ns": float64(lat[len(lat)*99/100]),
	}}
}
