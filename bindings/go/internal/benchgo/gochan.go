// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Go to Go: one producer goroutine and one consumer goroutine moving 16-byte
// messages through a channel of capacity 1024. Reported, not a target: a
// Go channel between goroutines never crosses into C, so this row shows
// the binding's cost, not where it wins.
func init() {
	Register([]Row{
		{Group: "gochan", Name: "Go→Go 1P1C 16 B, eventq Send/RecvInto", Unit: "msg", Run: goToGoEventq},
		{Group: "gochan", Name: "Go→Go 1P1C 16 B, Go buffered channel", Unit: "msg", Run: goToGoChan},
	}, nil)
}

var msg16 = []byte("0123456789abcdef")

const chunk = 4096 // messages between two looks at the clock

func goToGoEventq(min time.Duration) Result {
	ctx := context.Background()
	c, err := eventq.NewChan(eventq.WithCapacity(1024))
	if err != nil {
		panic(err)
	}
	defer c.Release()
	start := time.Now()
	var sent atomic.Int64 // read after end of stream, which C orders
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
	buf := make([]byte, 64)
	var got float64
	for {
		if _, err := c.RecvInto(ctx, buf); err != nil {
			if errors.Is(err, eventq.ErrClosed) {
				break
			}
			panic(err)
		}
		got++
	}
	el := time.Since(start)
	if got != float64(sent.Load()) {
		panic("benchgo: eventq lost messages")
	}
	return Result{Ops: got, Elapsed: el}
}

func goToGoChan(min time.Duration) Result {
	ch := make(chan []byte, 1024)
	start := time.Now()
	var sent float64
	go func() {
		for time.Since(start) < min {
			for range chunk {
				ch <- msg16
			}
			sent += chunk
		}
		close(ch)
	}()
	var got float64
	for range ch {
		got++
	}
	el := time.Since(start)
	if got != sent {
		panic("benchgo: lost messages")
	}
	return Result{Ops: got, Elapsed: el}
}
