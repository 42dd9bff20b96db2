// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

// Package ctest runs the C side of the eventq package's cross-language
// tests: producer threads and a loop consumer written in C against the C
// ABI, speaking the tests' message format. It exists only for those tests
// (cgo is not allowed in _test.go files) and is internal to the module.
package ctest

// #cgo CFLAGS: -std=c11 -D_GNU_SOURCE -Wall -Wextra
// #cgo LDFLAGS: -pthread
// #include "ctest.h"
import "C"

import "unsafe"

// MaxMsg is the longest message Make returns.
const MaxMsg = C.EQT_MAX_MSG

// Make returns the C helper's message for (producer, seq).
func Make(producer uint32, seq uint64) []byte {
	var buf [C.EQT_MAX_MSG]byte
	n := C.eqt_make((*C.uint8_t)(unsafe.Pointer(&buf[0])), C.uint32_t(producer), C.uint64_t(seq))
	return append([]byte(nil), buf[:n]...)
}

// Check reports whether the C helper accepts b as a whole message.
func Check(b []byte) (producer uint32, seq uint64, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	var p C.uint32_t
	var s C.uint64_t
	if C.eqt_check((*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b)), &p, &s) < 0 {
		return 0, 0, false
	}
	return uint32(p), uint64(s), true
}

// Producers are C threads sending into a channel.
type Producers struct{ p *C.struct_eqt_producers }

// StartProducers starts n C threads; thread i sends count messages of
// producer idBase+i with blocking sends (batch > 1: send_batch calls).
// It takes ownership of chanHandle, an eventq_chan* (Chan.CloneC).
func StartProducers(chanHandle unsafe.Pointer, n int, idBase uint32, count uint64, batch int) *Producers {
	p := C.eqt_producers_start((*C.eventq_chan)(chanHandle), C.int(n), C.uint32_t(idBase),
		C.uint64_t(count), C.int(batch))
	if p == nil {
		return nil
	}
	return &Producers{p}
}

// Wait joins the threads (blocking the calling goroutine's OS thread) and
// returns the messages sent in total and the first error code (0: none).
func (p *Producers) Wait() (sent uint64, rc int) {
	var s C.uint64_t
	r := C.eqt_producers_wait(p.p, &s)
	p.p = nil
	return uint64(s), int(r)
}

// Consumer is a C thread running a libeventq loop with a channel source.
type Consumer struct {
	c     *C.struct_eqt_consumer
	nprod int
}

// Result is what the C consumer saw.
type Result struct {
	Received, Bad, OutOfOrder, EOF uint64
	RC                             int
	// Next[i] is producer idBase+i's next expected sequence number: the
	// number of its messages received in order.
	Next []uint64
}

// StartConsumer starts the C loop consumer on chanHandle (an eventq_chan*,
// owned from now on by the consumer) for producers idBase..idBase+nprod-1.
func StartConsumer(chanHandle unsafe.Pointer, nprod int, idBase uint32) *Consumer {
	return &Consumer{C.eqt_consumer_start((*C.eventq_chan)(chanHandle), C.uint32_t(nprod), C.uint32_t(idBase)), nprod}
}

// Wait joins the consumer thread, which ends at end of stream.
func (c *Consumer) Wait() Result {
	var res C.struct_eqt_result
	next := make([]uint64, max(c.nprod, 1))
	C.eqt_consumer_wait(c.c, &res, (*C.uint64_t)(unsafe.Pointer(&next[0])))
	c.c = nil
	return Result{
		Received:   uint64(res.received),
		Bad:        uint64(res.bad),
		OutOfOrder: uint64(res.out_of_order),
		EOF:        uint64(res.eof),
		RC:         int(res.rc),
		Next:       next[:c.nprod],
	}
}

// Bench1P1C runs the C floor of the Go benchmarks: a C producer thread and
// a C consumer thread move n copies of msg through a new channel of the
// given capacity with blocking calls (batch > 1: send_batch/recv_batch of
// up to batch, at most 256) and returns the nanoseconds it took, or a
// negative errno.
func Bench1P1C(msg []byte, n uint64, batch, capacity int) int64 {
	var p *C.uint8_t
	if len(msg) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&msg[0]))
	}
	return int64(C.eqt_bench_1p1c(p, C.size_t(len(msg)), C.uint64_t(n), C.int(batch), C.size_t(capacity)))
}
