// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	_ "unsafe" // go:linkname

	eventq "github.com/libeventq/libeventq/bindings/go"
	"github.com/libeventq/libeventq/bindings/go/internal/cbench"
)

// C thread to Go: where the binding earns its keep. Producer threads made
// by C (pthread_create in internal/cbench, never by Go) hand 16-byte
// messages to one Go goroutine, which gets them
//
//   - from a libeventq channel of capacity 1024: the threads call
//     eventq_chan_send (blocking while full), the goroutine calls Chan.Recv
//     (a new []byte per message), Chan.RecvInto (one message per call into
//     a reused buffer, no allocation) or Chan.RecvBatchInto (up to
//     DefaultBatch messages per call, no allocation), waiting in the
//     netpoller when the channel is empty;
//   - from a Go function the threads call through //export, which sends on
//     a buffered Go channel of the same capacity, 1024, that the goroutine
//     ranges over: either a C.GoBytes copy on a chan []byte (an allocation
//     per message, the usual form, for any length) or a copy into a
//     [16]byte value on a chan [16]byte (no allocation, for a fixed size).
//     The function finds its channel in a package variable, not through a
//     cgo.Handle: the cheapest form of the idiom;
//   - from a pipe whose buffer holds 1024 messages: the threads write(2) one
//     message per call, the goroutine reads up to 1024 at a time from an
//     *os.File in the netpoller.
//
// Burst rows: 1 and 4 threads send back to back for the row's time; the
// figure is messages received per second. Idle rows: one thread sends a
// message stamped with CLOCK_MONOTONIC, then sleeps 200 µs
// (clock_nanosleep: the pacing of a mostly idle producer), and so on; the
// goroutine takes the receive time from runtime.nanotime, which is
// CLOCK_MONOTONIC read through the vDSO (checked against C's clock_gettime
// at the start of each idle run) and costs tens of nanoseconds against
// latencies of microseconds. The rows report the median and the 99th
// percentile of receive time minus send time ("p50 ns", "p99 ns"). The
// libeventq burst rows also report the channel's doorbell rings per
// message ("recv wakes/msg": the goroutine found the channel empty and
// waited in the netpoller; "send wakes/msg": the threads found it full):
// near zero, the figure is the cost of a message, not of wake-ups.
//
// Every row checks every message: each thread's sequence numbers arrive in
// order with none missing, each thread's count is what it sent, and burst
// messages carry their check word.
//
// The targets pair like with like: RecvInto with the [16]byte export (no
// allocation on either side), Recv with the []byte export (one allocation
// per message on either side), RecvBatchInto with the [16]byte export. The
// pipe is reported, not judged: it is the other way a C thread can wake
// a goroutine in the netpoller.
func init() {
	var rs []Row
	for _, n := range []int{1, 4} {
		for _, v := range []via{viaRecv, viaRecvInto, viaBatch, viaExportBytes, viaExport, viaPipe} {
			rs = append(rs, Row{Group: "cthread", Name: cthreadBurst(v, n), Unit: "msg",
				Run: func(min time.Duration) Result { return cthreadRun(v, n, min, 0) }})
		}
	}
	for _, v := range []via{viaRecvInto, viaBatch, viaExportBytes, viaExport, viaPipe} {
		rs = append(rs, Row{Group: "cthread", Name: cthreadIdle(v), Unit: "msg",
			Run: func(min time.Duration) Result { return cthreadRun(v, 1, min, idleGap) }})
	}
	var ts []Target
	for _, n := range []int{1, 4} {
		for _, p := range [][2]via{{viaRecvInto, viaExport}, {viaRecv, viaExportBytes}, {viaBatch, viaExport}} {
			ts = append(ts, Target{Group: "cthread",
				Name:  fmt.Sprintf("C→Go %dT msg/s: eventq %s / %s", n, p[0], p[1]),
				Value: Ratio(cthreadBurst(p[0], n), cthreadBurst(p[1], n)), Cmp: ">=", Goal: 1.5, Unit: "x"})
		}
		ts = append(ts, Target{Group: "cthread",
			Name:  fmt.Sprintf("C→Go %dT msg/s: eventq %s / %s", n, viaBatch, viaPipe),
			Value: Ratio(cthreadBurst(viaBatch, n), cthreadBurst(viaPipe, n)), Unit: "x"})
	}
	for _, p := range [][2]via{{viaRecvInto, viaExport}, {viaRecvInto, viaExportBytes}} {
		ts = append(ts, Target{Group: "cthread",
			Name:  fmt.Sprintf("C→Go idle p99: eventq %s / %s", p[0], p[1]),
			Value: MetricRatio(cthreadIdle(p[0]), cthreadIdle(p[1]), "p99 ns"), Cmp: "<=", Goal: 1.0, Unit: "x"})
	}
	for _, p := range [][2]via{{viaBatch, viaExport}, {viaRecvInto, viaPipe}} {
		ts = append(ts, Target{Group: "cthread",
			Name:  fmt.Sprintf("C→Go idle p99: eventq %s / %s", p[0], p[1]),
			Value: MetricRatio(cthreadIdle(p[0]), cthreadIdle(p[1]), "p99 ns"), Unit: "x"})
	}
	Register(rs, ts)
}

// via is how the Go goroutine gets the C threads' messages.
type via int

const (
	viaRecv via = iota
	viaRecvInto
	viaBatch
	viaExportBytes
	viaExport
	viaPipe
)

func (v via) String() string {
	return [...]string{"Recv", "RecvInto", "RecvBatchInto", "//export []byte", "//export [16]byte", "pipe"}[v]
}

// label is the row's name for v.
func (v via) label() string {
	switch v {
	case viaExportBytes:
		return "//export → chan []byte"
	case viaExport:
		return "//export → chan [16]byte"
	case viaPipe:
		return "pipe → os.File"
	}
	return "eventq " + v.String()
}

const (
	cthreadCap = 1024                   // the channel's, the Go channel's and the pipe's capacity, in messages
	idleGap    = 200 * time.Microsecond // the idle rows' pause between two messages
)

func cthreadBurst(v via, n int) string {
	t := "1 thread"
	if n != 1 {
		t = fmt.Sprintf("%d threads", n)
	}
	return fmt.Sprintf("C→Go %s burst, %s", t, v.label())
}

func cthreadIdle(v via) string {
	return fmt.Sprintf("C→Go 1 thread idle %v, %s", idleGap, v.label())
}

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// sink checks and counts what the goroutine receives.
type sink struct {
	next  []uint64 // each thread's next sequence number
	paced bool
	lat   []int64 // paced: receive time - send time, ns
	n     float64
}

const seqMask = 1<<cbench.SeqBits - 1

func (s *sink) take(b []byte) {
	if len(b) != cbench.MsgSize {
		s.bad(b)
	}
	w0 := binary.NativeEndian.Uint64(b)
	w1 := binary.NativeEndian.Uint64(b[8:])
	th, seq := w0>>cbench.SeqBits, w0&seqMask
	if th >= uint64(len(s.next)) || seq != s.next[th] {
		s.bad(b)
	}
	s.next[th]++
	s.n++
	if s.paced {
		s.lat = append(s.lat, nanotime()-int64(w1))
	} else if w1 != ^w0 {
		s.bad(b)
	}
}

//go:noinline
func (s *sink) bad(b []byte) {
	panic(fmt.Sprintf("benchgo: cthread: unexpected message %x (next seq per thread %v)", b, s.next))
}

func cthreadRun(v via, n int, min, gap time.Duration) Result {
	ctx := context.Background()
	s := &sink{next: make([]uint64, n), paced: gap > 0}
	if s.paced {
		s.lat = make([]int64, 0, int(min/gap)+64)
		c0 := cbench.Now()
		g := nanotime()
		if c1 := cbench.Now(); g < c0 || g > c1 {
			panic(fmt.Sprintf("benchgo: runtime.nanotime %d is not CLOCK_MONOTONIC (C read %d and %d around it)", g, c0, c1))
		}
	}
	start := time.Now()
	var run *cbench.Run
	var stats func() (eventq.Stats, error) // the eventq rows' channel counters
	switch v {
	case viaRecv, viaRecvInto, viaBatch:
		c, err := eventq.NewChan(eventq.WithCapacity(cthreadCap))
		if err != nil {
			panic(err)
		}
		defer c.Release()
		stats = c.Stats
		run = cbench.StartEventq(c.CloneC(), n, min, gap)
		switch v {
		case viaRecv:
			for {
				m, err := c.Recv(ctx)
				if err != nil {
					endOfStream(err)
					break
				}
				s.take(m)
			}
		case viaRecvInto:
			var buf [64]byte
			for {
				k, err := c.RecvInto(ctx, buf[:])
				if err != nil {
					endOfStream(err)
					break
				}
				s.take(buf[:k])
			}
		case viaBatch:
			buf := make([]byte, eventq.DefaultBatch*cbench.MsgSize)
			lens := make([]int, eventq.DefaultBatch)
			for {
				k, err := c.RecvBatchInto(ctx, buf, lens)
				if err != nil {
					endOfStream(err)
					break
				}
				off := 0
				for _, l := range lens[:k] {
					s.take(buf[off : off+l])
					off += l
				}
			}
		}
	case viaExportBytes:
		ch := make(chan []byte, cthreadCap)
		run = cbench.StartExportBytes(ch, n, min, gap)
		for m := range ch {
			s.take(m)
		}
	case viaExport:
		ch := make(chan [cbench.MsgSize]byte, cthreadCap)
		run = cbench.StartExport(ch, n, min, gap)
		for m := range ch {
			s.take(m[:])
		}
	case viaPipe:
		f, r, err := cbench.StartPipe(cthreadCap, n, min, gap)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		run = r
		buf := make([]byte, cthreadCap*cbench.MsgSize)
		have := 0 // bytes of a message not yet whole (none: writes of 16 B are atomic)
		for {
			k, err := f.Read(buf[have:])
			have += k
			whole := have - have%cbench.MsgSize
			for off := 0; off < whole; off += cbench.MsgSize {
				s.take(buf[off : off+cbench.MsgSize])
			}
			have = copy(buf, buf[whole:have])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				panic(err)
			}
		}
		if have != 0 {
			panic("benchgo: cthread: the pipe ended inside a message")
		}
	}
	sent, err := run.Wait()
	el := time.Since(start)
	if err != nil {
		panic(err)
	}
	var total uint64
	for i, k := range sent {
		total += k
		if s.next[i] != k {
			panic(fmt.Sprintf("benchgo: cthread %s: thread %d sent %d messages, %d arrived", v, i, k, s.next[i]))
		}
	}
	if s.n != float64(total) {
		panic("benchgo: cthread: lost messages")
	}
	res := Result{Ops: s.n, Elapsed: el, Metrics: map[string]float64{}}
	if s.paced {
		res.Metrics["p50 ns"], res.Metrics["p99 ns"] = pct(s.lat, 0.50), pct(s.lat, 0.99)
		res.Metrics["samples"] = s.n // some 2,000 in 0.5 s; far fewer when the machine is busy
	} else if stats != nil {
		// How often the goroutine found the channel empty (and waited in
		// the netpoller) and the threads found it full: the eventfd writes
		// that woke them, per message.
		st, err := stats()
		if err != nil {
			panic(err)
		}
		res.Metrics["recv wakes/msg"] = float64(st.RecvDoorbellRings) / s.n
		res.Metrics["send wakes/msg"] = float64(st.SendDoorbellRings) / s.n
	}
	return res
}

func endOfStream(err error) {
	if !errors.Is(err, eventq.ErrClosed) {
		panic(err)
	}
}

// pct is the p-quantile of v (nearest rank), which it sorts.
func pct(v []int64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(p*float64(len(v))+0.5) - 1
	return float64(v[max(0, min(i, len(v)-1))])
}
