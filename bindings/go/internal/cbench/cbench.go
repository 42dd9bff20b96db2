// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

// Package cbench is the C side of the bench-go rows "cthread"
// (internal/benchgo/cthread.go): producer threads created by C, not by Go,
// that hand 16-byte messages to a Go goroutine through a libeventq channel,
// through a Go function exported to C (//export) that sends on a Go
// channel, or through a pipe. It keeps the C code and the exported
// functions out of the benchmark's main package, and is internal to the
// module: a benchmark helper, not an API.
package cbench

// #cgo CFLAGS: -std=c11 -D_GNU_SOURCE -Wall -Wextra
// #cgo LDFLAGS: -pthread
// #include "cbench.h"
import "C"

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// MsgSize is the size of every message: two native-endian uint64 words.
// Word 0 is thread<<SeqBits | seq, seq counting from 0 in each thread;
// word 1 is the CLOCK_MONOTONIC nanoseconds just before the send in paced
// runs (Now's clock), and ^word0 in burst runs.
const (
	MsgSize = C.CB_MSG
	SeqBits = C.CB_SEQ_BITS
)

// Run is a set of C producer threads.
type Run struct {
	r      *C.struct_cb_run
	n      int
	export bool
}

// start starts threads C threads that send for at least run: back to back
// (gap 0), or paced, one message and then a sleep of gap. The last to
// finish ends the stream (closes the channel, the Go channel or the pipe).
func start(kind C.int, threads int, chanHandle unsafe.Pointer, fd int, run, gap time.Duration) *Run {
	r := C.cb_start(kind, C.int(threads), (*C.eventq_chan)(chanHandle), C.int(fd),
		C.int64_t(run.Nanoseconds()), C.int64_t(gap.Nanoseconds()))
	if r == nil {
		panic("cbench: out of memory")
	}
	return &Run{r: r, n: threads, export: kind == C.CB_EXPORT || kind == C.CB_EXPORT_BYTES}
}

// StartEventq starts the threads sending with eventq_chan_send
// (EVENTQ_FOREVER), each on its own clone of chanHandle, an eventq_chan*
// it takes ownership of (Chan.CloneC). The stream ends with
// eventq_chan_close.
func StartEventq(chanHandle unsafe.Pointer, threads int, run, gap time.Duration) *Run {
	return start(C.CB_EVENTQ, threads, chanHandle, -1, run, gap)
}

// Where the exported functions send: one export run at a time. The
// functions find their channel in a package variable, not through a
// cgo.Handle (a sync.Map look-up per call): the cheapest form of the idiom.
var (
	exportCh      chan<- [MsgSize]byte
	exportBytesCh chan<- []byte
)

// StartExport starts the threads calling cbenchExportSend, a Go function
// exported to C, which copies the message from C memory into a [16]byte
// and sends that on ch, blocking while ch is full (no allocation: the form
// for messages of a fixed size). The stream ends with close(ch). One
// export run at a time: Wait for it before the next.
func StartExport(ch chan<- [MsgSize]byte, threads int, run, gap time.Duration) *Run {
	claimExport()
	exportCh = ch
	return start(C.CB_EXPORT, threads, nil, -1, run, gap)
}

// StartExportBytes is StartExport through cbenchExportSendBytes, which
// sends C.GoBytes(msg) on a chan []byte: one allocation per message, the
// usual form, for messages of any length.
func StartExportBytes(ch chan<- []byte, threads int, run, gap time.Duration) *Run {
	claimExport()
	exportBytesCh = ch
	return start(C.CB_EXPORT_BYTES, threads, nil, -1, run, gap)
}

func claimExport() {
	if exportCh != nil || exportBytesCh != nil {
		panic("cbench: an export run is under way")
	}
}

//export cbenchExportSend
func cbenchExportSend(p *C.uint8_t, n C.size_t) {
	var m [MsgSize]byte
	copy(m[:], unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
	exportCh <- m
}

//export cbenchExportSendBytes
func cbenchExportSendBytes(p *C.uint8_t, n C.size_t) {
	exportBytesCh <- C.GoBytes(unsafe.Pointer(p), C.int(n))
}

//export cbenchExportEnd
func cbenchExportEnd() {
	if exportCh != nil {
		close(exportCh)
	} else {
		close(exportBytesCh)
	}
}

// StartPipe makes a pipe whose buffer holds capacity messages and starts
// the threads writing one message per write(2) to it; the stream ends when
// the last closes the write end. The read end is returned as an *os.File
// in the netpoller (non-blocking); the caller closes it after Wait.
func StartPipe(capacity, threads int, run, gap time.Duration) (*os.File, *Run, error) {
	var fds [2]C.int
	if rc := C.cb_pipe(&fds[0], C.int(capacity)); rc < 0 {
		return nil, nil, errno(rc)
	}
	f := os.NewFile(uintptr(fds[0]), "cbench-pipe")
	return f, start(C.CB_PIPE, threads, nil, int(fds[1]), run, gap), nil
}

// Wait joins the threads (blocking the goroutine's thread: call it after
// end of stream) and returns how many messages each sent, and the first
// error a thread met.
func (r *Run) Wait() ([]uint64, error) {
	sent := make([]uint64, max(r.n, 1))
	rc := C.cb_wait(r.r, (*C.uint64_t)(unsafe.Pointer(&sent[0])))
	r.r = nil
	if r.export {
		exportCh, exportBytesCh = nil, nil
	}
	return sent[:r.n], errno(rc)
}

// Now is CLOCK_MONOTONIC in nanoseconds, the clock of the paced messages'
// send times, read in C.
func Now() int64 { return int64(C.cb_now()) }

func errno(rc C.int) error {
	if rc >= 0 {
		return nil
	}
	return fmt.Errorf("cbench: %w", syscall.Errno(-rc))
}
