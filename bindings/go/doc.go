// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

// Package eventq is the Go binding of libeventq: per-event message delivery
// between threads and into event loops, with a Rust core behind a C ABI.
//
// A [Chan] is a bounded multi-producer multi-consumer queue of byte
// messages whose file descriptor is readable exactly while messages are
// pending: every message a send accepted is received exactly once, whole,
// and in its producer's order, whichever side of the cgo line sends or
// receives. Goroutines that wait on a Chan (receiving from an empty one,
// sending to a full one) wait in Go's netpoller, not on an OS thread, and
// a context.Context ends the wait; any number of goroutines may wait on
// one channel, as a worker pool does, and each message wakes one of them.
// A [Selector] waits on a set of channels built once, at a cost that does
// not grow with the set, and takes one message from one of them, losing
// nothing when the caller stops; [RecvAny] is its one-shot form.
//
// A channel made with [NewSharedChan] carries messages between two
// processes: its ring lives in a sealed memfd, one process sends and the
// other receives, and the other end is handed over a Unix socket
// ([Chan.SendTo], [RecvChanFrom]) or to a child as inherited files
// ([Chan.ExportFiles], [SharedFiles.PassTo], [ImportEnv]). The same
// contract holds across the two; when the sending process dies the
// receiver drains what was sent and then sees end of stream.
//
// A [Loop] is libeventq's epoll dispatcher, with Go callbacks for fd,
// timer, channel and signal sources, posts from any goroutine ([Loop.Post],
// or [Loop.PostWait] to wait for room), panics in callbacks recovered and
// returned as errors, and runtime.Goexit in a callback ending the goroutine
// that runs the loop without breaking the loop.
//
// # Errors
//
// Every error from the C library wraps its errno as a syscall.Errno, so
// errors.Is works with both the sentinels ([ErrClosed], [ErrWouldBlock],
// [ErrTooLarge], [ErrWrongSide], ...) and the errno (syscall.EPIPE,
// syscall.EAGAIN, ...).
//
// # Linking
//
// The package links libeventq through pkg-config (eventq.pc); build with
// -tags static to link libeventq.a instead. For a library installed outside
// the default paths:
//
//	PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig CGO_LDFLAGS="-Wl,-rpath,$PREFIX/lib" go test ./...
package eventq
