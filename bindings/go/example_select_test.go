// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// A Selector is built once and received from many times: each Recv costs
// the same whatever the number of channels. A channel that ends (closed
// and drained) is reported with ErrClosed and removed; the loop ends when
// none is left.
func ExampleSelector() {
	names := map[*eventq.Chan]string{}
	var chans []*eventq.Chan
	for _, name := range []string{"orders", "alerts", "audit"} {
		ch, _ := eventq.NewChan()
		defer ch.Release()
		names[ch] = name
		chans = append(chans, ch)
	}
	sel, err := eventq.NewSelector(chans...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sel.Close()

	chans[0].TrySend([]byte("order 1"))
	chans[1].TrySend([]byte("disk full"))
	chans[0].TrySend([]byte("order 2"))
	for _, ch := range chans {
		ch.Close()
	}

	got := map[string][]string{}
	for sel.Len() > 0 {
		ch, msg, err := sel.Recv(context.Background())
		switch {
		case errors.Is(err, eventq.ErrClosed):
			sel.Remove(ch) // ch ended
		case err != nil:
			fmt.Println(err)
			return
		default:
			got[names[ch]] = append(got[names[ch]], string(msg))
		}
	}
	fmt.Println(got["orders"], got["alerts"], len(got["audit"]))
	// Output:
	// [order 1 order 2] [disk full] 0
}

// A deadline is the timer of the select; a Recv that ends by it takes
// nothing.
func ExampleSelector_Recv_timeout() {
	a, _ := eventq.NewChan()
	defer a.Release()
	b, _ := eventq.NewChan()
	defer b.Release()
	sel, _ := eventq.NewSelector(a, b)
	defer sel.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, _, err := sel.Recv(ctx)
	fmt.Println(err)

	b.TrySend([]byte("late"))
	ch, msg, err := sel.Recv(context.Background())
	fmt.Println(ch == b, string(msg), err)
	// Output:
	// context deadline exceeded
	// true late <nil>
}
