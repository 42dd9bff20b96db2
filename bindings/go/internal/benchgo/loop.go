// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"context"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// The loop's Go callbacks. A channel callback row fills a channel with
// 8-byte messages (not timed), then times one Run that delivers them all,
// one ChanFunc call each (AddChanBatch: one call per batch of up to 256),
// so the figure is the consumer's cost per message alone. The Post row
// times a goroutine posting to a running loop (PostWait, so a full queue
// waits) until the loop ran every post. Beside them, what a Go program
// would write instead: a goroutine ranging over a Go channel, of 8-byte
// messages or of funcs (reported, not targets: no C is crossed there).
func init() {
	Register([]Row{
		{Group: "loop", Name: "loop channel callback 8 B", Unit: "msg", Run: loopChanCallback(false)},
		{Group: "loop", Name: "loop channel batch callback 8 B (AddChanBatch)", Unit: "msg", Run: loopChanCallback(true)},
		{Group: "loop", Name: "Go: goroutine ranging over a Go channel 8 B", Unit: "msg", Run: goRangeChan},
		{Group: "loop", Name: "loop Post", Unit: "post", Run: loopPost},
		{Group: "loop", Name: "Go: goroutine ranging over a chan func()", Unit: "post", Run: goRangeFuncs},
	}, []Target{
		{Group: "loop", Name: "loop channel callback 8 B: ns per message", Cmp: "<=", Goal: 150, Unit: "ns",
			Value: func(rep map[string]Result) float64 { return rep["loop channel callback 8 B"].NsPerOp() }},
		{Group: "loop", Name: "loop Post: ns per post", Cmp: "<=", Goal: 300, Unit: "ns",
			Value: func(rep map[string]Result) float64 { return rep["loop Post"].NsPerOp() }},
	})
}

const loopFill = 1 << 16 // messages a channel is filled with before a timed Run

var msg8 = []byte("01234567")

func loopChanCallback(batch bool) func(min time.Duration) Result {
	return func(min time.Duration) Result {
		lp, err := eventq.NewLoop()
		if err != nil {
			panic(err)
		}
		defer lp.Close()
		c, err := eventq.NewChan(eventq.WithCapacity(loopFill))
		if err != nil {
			panic(err)
		}
		defer c.Release()
		got, want := 0, 0
		if batch {
			_, err = lp.AddChanBatch(c, func(_ *eventq.Source, msgs [][]byte, _ bool) error {
				if got += len(msgs); got == want {
					lp.Stop()
				}
				return nil
			})
		} else {
			_, err = lp.AddChan(c, func(_ *eventq.Source, msg []byte, _ bool) error {
				if len(msg) != 8 {
					panic("benchgo: a message of the wrong length")
				}
				if got++; got == want {
					lp.Stop()
				}
				return nil
			})
		}
		if err != nil {
			panic(err)
		}
		var el time.Duration
		for el < min {
			for i := 0; i < loopFill; i++ {
				if err := c.TrySend(msg8); err != nil {
					panic(err)
				}
			}
			want += loopFill
			start := time.Now()
			if err := lp.Run(); err != nil {
				panic(err)
			}
			el += time.Since(start)
			if got != want {
				panic("benchgo: the loop lost messages")
			}
		}
		return Result{Ops: float64(got), Elapsed: el}
	}
}

func goRangeChan(min time.Duration) Result {
	var el time.Duration
	var got float64
	for el < min {
		ch := make(chan []byte, loopFill)
		for i := 0; i < loopFill; i++ {
			ch <- msg8
		}
		close(ch)
		done := make(chan int)
		start := time.Now()
		go func() {
			n := 0
			for m := range ch {
				if len(m) != 8 {
					panic("benchgo: a message of the wrong length")
				}
				n++
			}
			done <- n
		}()
		got += float64(<-done)
		el += time.Since(start)
	}
	return Result{Ops: got, Elapsed: el}
}

func loopPost(min time.Duration) Result {
	lp, err := eventq.NewLoop()
	if err != nil {
		panic(err)
	}
	defer lp.Close()
	ctx := context.Background()
	ran := 0
	fn := func() { ran++ }
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- lp.Run() }()
	posted := 0
	for time.Since(start) < min {
		for range chunk {
			if err := lp.PostWait(ctx, fn); err != nil {
				panic(err)
			}
		}
		posted += chunk
	}
	if err := lp.PostWait(ctx, func() { lp.Stop() }); err != nil {
		panic(err)
	}
	if err := <-runErr; err != nil {
		panic(err)
	}
	el := time.Since(start)
	if ran != posted {
		panic("benchgo: posts lost")
	}
	return Result{Ops: float64(posted), Elapsed: el}
}

func goRangeFuncs(min time.Duration) Result {
	ch := make(chan func(), 4096)
	ran := 0
	fn := func() { ran++ }
	start := time.Now()
	done := make(chan struct{})
	go func() {
		for f := range ch {
			f()
		}
		close(done)
	}()
	posted := 0
	for time.Since(start) < min {
		for range chunk {
			ch <- fn
		}
		posted += chunk
	}
	close(ch)
	<-done
	el := time.Since(start)
	if ran != posted {
		panic("benchgo: posts lost")
	}
	return Result{Ops: float64(posted), Elapsed: el}
}
