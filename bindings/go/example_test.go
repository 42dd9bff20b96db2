// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// A producer goroutine sends and closes; the consumer ranges over the
// messages until end of stream, waiting in the netpoller when the channel
// is empty.
func ExampleChan() {
	ch, err := eventq.NewChan(eventq.WithCapacity(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ch.Release()

	go func() {
		for _, s := range []string{"one", "two", "three"} {
			if err := ch.Send(context.Background(), []byte(s)); err != nil {
				fmt.Println(err)
			}
		}
		ch.Close() // end of stream: the receiver's range ends
	}()

	msgs, errf := ch.All(context.Background())
	for msg := range msgs {
		fmt.Println(string(msg))
	}
	if err := errf(); err != nil { // nil at end of stream
		fmt.Println(err)
		return
	}
	st, _ := ch.Stats()
	fmt.Println("sent", st.Sent, "received", st.Received)
	// Output:
	// one
	// two
	// three
	// sent 3 received 3
}

// Batches amortise the cgo crossing: one call moves many messages.
func ExampleChan_SendBatch() {
	ch, _ := eventq.NewChan()
	defer ch.Release()

	n, err := ch.SendBatch(context.Background(), [][]byte{[]byte("a"), []byte("bb"), []byte("ccc")})
	fmt.Println("queued", n, err)

	msgs, err := ch.RecvBatch(context.Background(), 10)
	for _, m := range msgs {
		fmt.Printf("%s ", m)
	}
	fmt.Println(err)
	// Output:
	// queued 3 <nil>
	// a bb ccc <nil>
}

// The allocation-free batch path: receive into buffers the consumer
// reuses, and forward a received batch as it is.
func ExampleChan_RecvBatchInto() {
	in, _ := eventq.NewChan()
	defer in.Release()
	out, _ := eventq.NewChan()
	defer out.Release()
	in.SendBatch(context.Background(), [][]byte{[]byte("a"), []byte("bb"), []byte("ccc")})

	buf, lens := make([]byte, 4096), make([]int, 64) // reused for every batch
	n, err := in.RecvBatchInto(context.Background(), buf, lens)
	off := 0
	for _, l := range lens[:n] {
		fmt.Printf("%s ", buf[off:off+l])
		off += l
	}
	fmt.Println(n, err)

	k, err := out.SendPacked(context.Background(), buf, lens[:n])
	fmt.Println("forwarded", k, err)
	// Output:
	// a bb ccc 3 <nil>
	// forwarded 3 <nil>
}

// A buffer that is too small loses nothing: the error says the length
// needed and the message stays queued.
func ExampleChan_RecvInto() {
	ch, _ := eventq.NewChan()
	defer ch.Release()
	ch.TrySend([]byte("a longer message"))

	buf := make([]byte, 4)
	_, err := ch.RecvInto(context.Background(), buf)
	var small *eventq.BufferTooSmallError
	if errors.As(err, &small) {
		fmt.Println("needs", small.Needed, "bytes")
		buf = make([]byte, small.Needed)
	}
	n, err := ch.RecvInto(context.Background(), buf)
	fmt.Printf("%q %v\n", buf[:n], err)
	// Output:
	// needs 16 bytes
	// "a longer message" <nil>
}

// A loop dispatches each message of a channel to a Go callback, on the
// goroutine that runs it.
func ExampleLoop() {
	lp, err := eventq.NewLoop()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lp.Close()
	ch, _ := eventq.NewChan()
	defer ch.Release()

	_, err = lp.AddChan(ch, func(src *eventq.Source, msg []byte, eof bool) error {
		if eof {
			fmt.Println("end of stream")
			return lp.Stop()
		}
		fmt.Printf("handled %s\n", msg)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ch.TrySend([]byte("request 1"))
	ch.TrySend([]byte("request 2"))
	ch.Close()

	if err := lp.Run(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// handled request 1
	// handled request 2
	// end of stream
}

// A panic in a callback does not crash the program: Run returns it.
func ExampleLoop_panic() {
	lp, _ := eventq.NewLoop()
	defer lp.Close()
	lp.Post(func() { panic("bad handler") })

	err := lp.Run()
	var perr *eventq.PanicError
	fmt.Println(errors.As(err, &perr), perr.Value)
	// Output:
	// true bad handler
}

// RecvAny waits on several channels at once and takes one message from one
// of them; a channel closed and drained reports ErrClosed with its index
// and leaves the set.
func ExampleRecvAny() {
	orders, _ := eventq.NewChan()
	defer orders.Release()
	alerts, _ := eventq.NewChan()
	defer alerts.Release()
	orders.TrySend([]byte("order 1"))
	orders.TrySend([]byte("order 2"))
	alerts.TrySend([]byte("disk full"))
	orders.Close()
	alerts.Close()

	chans := []*eventq.Chan{orders, alerts}
	names := []string{"orders", "alerts"}
	got := map[string][]string{}
	for len(chans) > 0 {
		i, msg, err := eventq.RecvAny(context.Background(), chans...)
		switch {
		case errors.Is(err, eventq.ErrClosed): // chans[i] ended
			chans = slices.Delete(chans, i, i+1)
			names = slices.Delete(names, i, i+1)
		case err != nil:
			fmt.Println(err)
			return
		default:
			got[names[i]] = append(got[names[i]], string(msg))
		}
	}
	fmt.Println(got["orders"], got["alerts"])
	// Output:
	// [order 1 order 2] [disk full]
}

// A deadline is the timer of the select: RecvAny returns when it passes,
// having taken nothing, so what arrives later waits for the next receive.
func ExampleRecvAny_timeout() {
	a, _ := eventq.NewChan()
	defer a.Release()
	b, _ := eventq.NewChan()
	defer b.Release()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, _, err := eventq.RecvAny(ctx, a, b)
	fmt.Println(err)

	b.TrySend([]byte("late"))
	i, msg, err := eventq.RecvAny(context.Background(), a, b)
	fmt.Println(i, string(msg), err)
	// Output:
	// context deadline exceeded
	// 1 late <nil>
}

// A process hands the sending end of a process-shared channel to each
// process that connects to its Unix socket (here the other process is a
// goroutine of this program, to keep the example whole).
func ExampleChan_SendTo() {
	addr := &net.UnixAddr{Name: fmt.Sprintf("@eventq-example-%d", os.Getpid()), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	go func() { // the other process: connects and takes the sending end
		conn, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			fmt.Println(err)
			return
		}
		tx, err := eventq.RecvChanFrom(conn)
		conn.Close()
		if err != nil {
			fmt.Println(err)
			return
		}
		defer tx.Release()
		tx.Send(context.Background(), []byte("hello from the other end"))
		tx.Close() // end of stream (exiting would end it too)
	}()

	rx, _ := eventq.NewSharedChan(eventq.SideRecv)
	defer rx.Release()
	conn, err := ln.AcceptUnix()
	if err != nil {
		fmt.Println(err)
		return
	}
	err = rx.SendTo(conn)
	conn.Close()
	fmt.Println(rx.Side(), err)

	msgs, errf := rx.All(context.Background())
	for msg := range msgs {
		fmt.Println(string(msg))
	}
	fmt.Println(errf())
	// Output:
	// recv <nil>
	// hello from the other end
	// <nil>
}

// A parent makes a channel, starts a child that inherits the sending end
// (ExportFiles, PassTo), and receives until the child closes the channel
// or dies. The child here is this program run again; ImportEnv takes its
// end.
func ExampleNewSharedChan() {
	ctx := context.Background()
	if os.Getenv("WORKER_CHAN") != "" { // the child
		tx, err := eventq.ImportEnv("WORKER_CHAN")
		if err != nil {
			log.Fatal(err)
		}
		for i := range 3 {
			tx.Send(ctx, fmt.Appendf(nil, "result %d", i))
		}
		os.Exit(0) // end of stream by exit (tx.Close would end it too)
	}

	rx, err := eventq.NewSharedChan(eventq.SideRecv, eventq.WithCapacity(256))
	if err != nil {
		log.Fatal(err)
	}
	defer rx.Release()
	files, err := rx.ExportFiles()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	files.PassTo(cmd, "WORKER_CHAN") // ExtraFiles, and WORKER_CHAN=send:3,4,5,6
	err = cmd.Start()
	files.Close() // the child holds its end now; ours would hide its death
	if err != nil {
		log.Fatal(err)
	}
	msgs, errf := rx.All(ctx)
	for msg := range msgs {
		fmt.Println(string(msg))
	}
	if err := errf(); err != nil {
		log.Fatal(err)
	}
	cmd.Wait()
}
