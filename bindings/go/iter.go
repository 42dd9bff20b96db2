package eventq

import (
	"context"
	"errors"
	"iter"
)

// All returns an iterator over the channel's messages, for a range loop:
//
//	for msg, err := range ch.All(ctx) {
//		if err != nil {
//			return err // ctx.Err() or ErrReleased
//		}
//		handle(msg)
//	}
//
// It ends without an error at end of stream (the channel closed and
// drained), and yields one non-nil error and ends when the receive fails
// otherwise (ctx done, handle released). Breaking out of the loop loses
// nothing: each step takes exactly the message it yields.
//
// Cost: each step is a Recv, one cgo crossing and one allocation per
// message (waiting in the netpoller only when the channel is empty). Where
// that matters, range over Batches instead: one crossing and two
// allocations per batch of up to DefaultBatch messages (or loop over
// RecvBatchInto, which allocates nothing).
func (c *Chan) All(ctx context.Context) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for {
			msg, err := c.Recv(ctx)
			if errors.Is(err, ErrClosed) {
				return
			}
			if !yield(msg, err) || err != nil {
				return
			}
		}
	}
}

// Batches returns an iterator over the channel's messages in batches of up
// to max (max <= 0: DefaultBatch), each taken with one RecvBatch; errors
// and end of stream as for All. A batch is yielded whole, so breaking out
// of the loop loses nothing either.
func (c *Chan) Batches(ctx context.Context, max int) iter.Seq2[[][]byte, error] {
	return func(yield func([][]byte, error) bool) {
		for {
			msgs, err := c.RecvBatch(ctx, max)
			if errors.Is(err, ErrClosed) {
				return
			}
			if !yield(msgs, err) || err != nil {
				return
			}
		}
	}
}
