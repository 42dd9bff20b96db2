// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

// errnoError is the binding's error: a message and the errno the C library
// returned, which it wraps, so errors.Is matches both a sentinel below and
// the syscall.Errno. The memory-cgroup calls return one that says what was
// being done and what the code means there (see memcgErr).
type errnoError struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoError) Error() string { return e.msg }
func (e *errnoError) Unwrap() error { return e.errno }

// Sentinel errors. Each wraps the syscall.Errno the C library returned, so
// both errors.Is(err, ErrClosed) and errors.Is(err, syscall.EPIPE) hold.
var (
	// ErrClosed: the channel is closed. A send fails with it at once; a
	// receive returns it once the channel is closed and drained (end of
	// stream). Wraps syscall.EPIPE.
	ErrClosed error = &errnoError{"eventq: channel closed", syscall.EPIPE}

	// ErrWouldBlock: a TrySend found no room, a TryRecv found no message,
	// or Loop.Post found the post queue full. Wraps syscall.EAGAIN.
	ErrWouldBlock error = &errnoError{"eventq: operation would block", syscall.EAGAIN}

	// ErrTooLarge: a message is longer than the channel's maximum message
	// size (or its byte limit); nothing was queued. Wraps syscall.EMSGSIZE.
	ErrTooLarge error = &errnoError{"eventq: message too large for the channel", syscall.EMSGSIZE}

	// ErrReleased: the Chan handle was released (Release, or its
	// finalizer); goroutines still waiting on it wake with this error.
	// Wraps syscall.EBADF.
	ErrReleased error = &errnoError{"eventq: channel handle released", syscall.EBADF}

	// ErrLoopClosed: the Loop was closed. Wraps syscall.EBADF.
	ErrLoopClosed error = &errnoError{"eventq: loop closed", syscall.EBADF}

	// ErrRemoved: the Source was removed, by Remove or by closing its loop.
	// Wraps syscall.ESTALE.
	ErrRemoved error = &errnoError{"eventq: source removed", syscall.ESTALE}

	// ErrBusy: the loop is already being run (Run and RunOnce are one
	// goroutine at a time, and not from inside a callback). Wraps
	// syscall.EBUSY.
	ErrBusy error = &errnoError{"eventq: loop already running", syscall.EBUSY}

	// ErrGoexit: the source's callback called runtime.Goexit (t.FailNow,
	// t.SkipNow, ...), which disabled the source; Source.Err returns it.
	// The goroutine running the loop exits (see Loop). Wraps
	// syscall.ECANCELED, the code handed back to the C library.
	ErrGoexit error = &errnoError{"eventq: runtime.Goexit in loop callback", syscall.ECANCELED}

	// ErrCgroupClosed: the Cgroup was closed before a watch was made with
	// it. Wraps syscall.EBADF.
	ErrCgroupClosed error = &errnoError{"eventq: cgroup handle closed", syscall.EBADF}

	// ErrWatchUsed: the MemcgWatch was already added to a loop (by
	// Loop.AddMemcg, which takes it over) or closed. Wraps syscall.EBADF.
	ErrWatchUsed error = &errnoError{"eventq: memcg watch already added or closed", syscall.EBADF}

	// ErrWrongSide: this end of a process-shared channel only sends, or
	// only receives (see Side), and the call was the other kind. Wraps
	// syscall.EPERM.
	ErrWrongSide error = &errnoError{"eventq: this end of the shared channel does not do that (wrong side)", syscall.EPERM}

	// ErrBrokenProtocol: the other process of a process-shared channel
	// broke its protocol (a word of the shared memory out of its range),
	// or what RecvChanFrom or ImportFiles was given is not a channel's
	// end. The channel is closed on this side. Wraps syscall.EPROTO.
	ErrBrokenProtocol error = &errnoError{"eventq: the other process broke the shared channel's protocol", syscall.EPROTO}

	// ErrAttached: the other end of a process-shared channel is held by a
	// live process, so SendTo or ExportFiles cannot hand it to another
	// (once that process is gone, they can). Wraps syscall.EISCONN.
	ErrAttached error = &errnoError{"eventq: the other end of the shared channel is held by a live process", syscall.EISCONN}
)

// BufferTooSmallError is returned by RecvInto when the caller's buffer is
// shorter than the head message. The message stays queued (D7): receive it
// again with a buffer of at least Needed bytes. It wraps syscall.EMSGSIZE.
type BufferTooSmallError struct {
	// Needed is the length of the head message when the receive was tried.
	Needed int
}

func (e *BufferTooSmallError) Error() string {
	return fmt.Sprintf("eventq: receive buffer too small: the message needs %d bytes (it stays queued)", e.Needed)
}

// Unwrap returns syscall.EMSGSIZE.
func (e *BufferTooSmallError) Unwrap() error { return syscall.EMSGSIZE }

// PanicError is a panic recovered from a Go callback of a Loop. The source
// whose callback panicked is disabled, Run stops after the current
// iteration, and Run or RunOnce returns the PanicError (also kept by the
// Source, see Source.Err). It wraps syscall.ENOTRECOVERABLE, the code handed
// back to the C library.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, from runtime/debug.Stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("eventq: panic in loop callback: %v", e.Value)
}

// Unwrap returns the panic value if it is an error, else
// syscall.ENOTRECOVERABLE.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return syscall.ENOTRECOVERABLE
}

// errOf maps a negative return code of the C library to a Go error: the
// sentinels above where one applies, else the bare syscall.Errno. Zero and
// positive codes are success (nil).
func errOf(rc C.int) error {
	if rc >= 0 {
		return nil
	}
	switch errno := syscall.Errno(-rc); errno {
	case syscall.EPIPE:
		return ErrClosed
	case syscall.EAGAIN:
		return ErrWouldBlock
	case syscall.EMSGSIZE:
		return ErrTooLarge
	case syscall.ESTALE:
		return ErrRemoved
	case syscall.EBUSY:
		return ErrBusy
	case syscall.EPROTO:
		return ErrBrokenProtocol
	case syscall.EISCONN:
		return ErrAttached
	default:
		return errno
	}
}

// textError is an error of the binding with the C library's text for it
// (eventq_last_error: the argument or condition behind the code) added to
// its message. It unwraps to the error it extends, so errors.Is and
// errors.As see that error, its sentinel and its syscall.Errno as before.
type textError struct {
	err  error
	text string
}

func (e *textError) Error() string { return e.err.Error() + ": " + e.text }
func (e *textError) Unwrap() error { return e.err }

// withText adds text, the C library's for the code err came from, to
// err's message; err as it is when either is empty.
func withText(err error, text string) error {
	if err == nil || text == "" {
		return err
	}
	return &textError{err, text}
}

// cCall runs f, one call into libeventq that returns a code, with the
// goroutine locked to its OS thread, and returns the code and, for a
// failure, eventq_last_error's text for it ("" without one). The text is
// per thread, and without the lock the goroutine could move to another
// thread (and another goroutine's call take its place) between the two
// calls. Used for the calls whose failures have something to say (options,
// adds, handovers, memory cgroups), not on the send and receive paths,
// whose codes (EAGAIN, ETIMEDOUT, EPIPE) come without a text.
func cCall(f func() C.int) (C.int, string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rc := f()
	if rc >= 0 {
		return rc, ""
	}
	p := C.eventq_last_error()
	if p == nil {
		return rc, ""
	}
	return rc, C.GoString(p)
}

// chanErr is errOf for the channel calls, where EPERM means the wrong
// side of a process-shared channel (elsewhere, as for a loop's fd source,
// it means something else).
func chanErr(rc C.int) error {
	if rc == -C.int(syscall.EPERM) {
		return ErrWrongSide
	}
	return errOf(rc)
}

// callbackCode is what a Go callback's error becomes for the C library: its
// errno when it wraps one, else ECANCELED. Always negative.
func callbackCode(err error) C.int {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno > 0 {
		return -C.int(errno)
	}
	return -C.int(syscall.ECANCELED)
}

// Strerror is the C library's description of a return code (negative or
// positive), from eventq_strerror.
func Strerror(code int) string {
	return C.GoString(C.eventq_strerror(C.int(code)))
}

// Version is the C library's version string, e.g. "0.2.0".
func Version() string {
	return C.GoString(C.eventq_version_string())
}

// libVersion is eventq_version(): (major << 16) | (minor << 8) | patch.
func libVersion() uint32 { return uint32(C.eventq_version()) }
