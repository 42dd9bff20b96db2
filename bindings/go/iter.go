// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

import (
	"context"
	"errors"
	"iter"
)

// All returns an iterator over the channel's messages, for a range loop,
// and a function that reports why the range ended:
//
//	msgs, errf := ch.All(ctx)
//	for msg := range msgs {
//		handle(msg)
//	}
//	if err := errf(); err != nil {
//		return err // ctx.Err() or ErrReleased
//	}
//
// The range ends at end of stream (the channel closed and drained: errf
// returns nil) or when a receive fails otherwise (ctx done, handle
// released: errf returns that error). The two results make the error hard
// to drop by accident: `for msg := range ch.All(ctx)` does not compile,
// and ignoring the error takes an explicit `msgs, _ := ch.All(ctx)`.
//
// errf reports the last range over msgs: call it after the loop, from the
// goroutine that ranged (nil after a break). Breaking out of the loop loses
// nothing: each step takes exactly the message it yields, and the next
// range, or any receive, continues with the next message.
//
// Cost: each step is a Recv, one cgo crossing and one allocation per
// message (waiting in the netpoller only when the channel is empty). Where
// that matters, range over Batches instead: one crossing and two
// allocations per batch of up to DefaultBatch messages (or loop over
// RecvBatchInto, which allocates nothing).
func (c *Chan) All(ctx context.Context) (msgs iter.Seq[[]byte], errf func() error) {
	var err error
	msgs = func(yield func([]byte) bool) {
		err = nil
		for {
			msg, e := c.Recv(ctx)
			if e != nil {
				err = endErr(e)
				return
			}
			if !yield(msg) {
				return
			}
		}
	}
	return msgs, func() error { return err }
}

// Batches returns an iterator over the channel's messages in batches of up
// to max (max <= 0: DefaultBatch), each taken with one RecvBatch, and a
// function that reports why the range ended, as for All. A batch is
// yielded whole, so breaking out of the loop loses nothing either.
func (c *Chan) Batches(ctx context.Context, max int) (batches iter.Seq[[][]byte], errf func() error) {
	var err error
	batches = func(yield func([][]byte) bool) {
		err = nil
		for {
			b, e := c.RecvBatch(ctx, max)
			if e != nil {
				err = endErr(e)
				return
			}
			if !yield(b) {
				return
			}
		}
	}
	return batches, func() error { return err }
}

// endErr is the error a range ended with: nil at end of stream.
func endErr(err error) error {
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}
