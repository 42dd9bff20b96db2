// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// #include <eventq.h>
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Side is the end of a process-shared channel a process holds: one process
// sends on the channel and the other receives, each with any number of
// goroutines.
type Side int

const (
	// SideSend: this process sends; the other receives.
	SideSend Side = C.EVENTQ_SIDE_SEND
	// SideRecv: this process receives; the other sends.
	SideRecv Side = C.EVENTQ_SIDE_RECV
)

// String is "send", "recv", or "none" for the zero Side (a channel within
// one process).
func (s Side) String() string {
	switch s {
	case SideSend:
		return "send"
	case SideRecv:
		return "recv"
	case 0:
		return "none"
	}
	return "Side(" + strconv.Itoa(int(s)) + ")"
}

// NewSharedChan creates a channel to share with one other process and
// returns the handle of this process's end, which does only side: a
// SideSend end sends and never receives, a SideRecv end the reverse (the
// other kind of call fails with ErrWrongSide). Hand the other end to the
// other process with SendTo (over a Unix socket) or ExportFiles (for a
// child to inherit). Any number of goroutines may use each end.
//
// The options are NewChan's, except that WithMaxMessageSize defaults to
// 4096 (at most 16 MiB: every slot holds a whole message, in a memfd of
// about capacity times that size, resident only as messages reach it) and
// WithMaxBytes must not be set (an error wrapping syscall.EINVAL).
//
// Between two processes the contract (D1-D9) holds as in one, with what
// a death does (docs/design.md, "Between processes"):
//
//   - The sending process dies: every message whose Send returned nil is
//     received exactly once; then Recv returns ErrClosed (end of stream).
//   - The receiving process dies: what its receives had taken is gone with
//     it, the rest stays queued for a successor (SendTo or ExportFiles
//     again); a Send that finds the channel full returns ErrClosed
//     instead of waiting.
//   - Close from either process closes the channel for both.
//   - A process that breaks the protocol (writes the shared memory out of
//     turn) makes this end's calls fail with ErrBrokenProtocol; the
//     channel is closed on this side.
//
// The receive and send fds (RecvFd, SendFd) are epoll fds here, readable
// also once the other process is gone. Recv and Send wait on them in the
// netpoller as on any channel.
func NewSharedChan(side Side, opts ...Option) (*Chan, error) {
	copts, err := cOptions(opts)
	if err != nil {
		return nil, err
	}
	var p *C.eventq_chan
	if rc, text := cCall(func() C.int { return C.eventq_chan_new_shared(&copts, C.int(side), &p) }); rc < 0 {
		return nil, withText(chanErr(rc), text)
	}
	return wrapChan(p), nil
}

// Side returns this end's side of a process-shared channel, and 0 for a
// channel within this process or a released handle.
func (c *Chan) Side() Side {
	if !c.use(refOther) {
		return 0
	}
	defer c.done(refOther)
	return Side(C.eventq_chan_side(c.ptr))
}

// SendTo hands the other end of this process-shared channel to the process
// at the other end of conn, a connected Unix socket, which takes it with
// RecvChanFrom: the channel's fds ride one SCM_RIGHTS message. Allowed
// while no other process holds that end: before the first handover, or
// once the process that held it is gone (the successor then finds what
// the gone one had not taken still queued); ErrAttached otherwise. A
// channel that is not process-shared gives an error wrapping
// syscall.EINVAL; a socket whose other end is closed one wrapping
// syscall.EPIPE (not ErrClosed: the channel is fine).
//
// The socket is reached through conn.SyscallConn, not conn.File: conn
// stays non-blocking and in the netpoller, and a full socket buffer waits
// there, as long as conn's write deadline allows.
func (c *Chan) SendTo(conn *net.UnixConn) error {
	if conn == nil {
		return syscall.EINVAL
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	if !c.use(refOther) {
		return ErrReleased
	}
	defer c.done(refOther)
	var rc C.int
	if err := raw.Write(func(fd uintptr) bool {
		rc = C.eventq_chan_send_to(c.ptr, C.int(fd))
		return rc != eagain
	}); err != nil {
		return err
	}
	if rc == -C.int(syscall.EPIPE) {
		// The socket's other end is gone (not the channel: ErrClosed
		// would say that).
		return os.NewSyscallError("sendmsg", syscall.EPIPE)
	}
	return chanErr(rc)
}

// RecvChanFrom takes the end of a process-shared channel that the process
// at the other end of conn hands over with SendTo (or eventq_chan_send_to
// in C), and returns its handle. It waits in the netpoller for the
// handover, as long as conn's read deadline allows (os.ErrDeadlineExceeded
// then); conn stays non-blocking, as for SendTo. Everything received is
// checked first: ErrBrokenProtocol if it is not a channel's end (or conn
// reached end of file first).
func RecvChanFrom(conn *net.UnixConn) (*Chan, error) {
	if conn == nil {
		return nil, syscall.EINVAL
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var p *C.eventq_chan
	var rc C.int
	if err := raw.Read(func(fd uintptr) bool {
		rc = C.eventq_chan_recv_from(C.int(fd), &p)
		return rc != eagain
	}); err != nil {
		return nil, err
	}
	if rc < 0 {
		return nil, chanErr(rc)
	}
	return wrapChan(p), nil
}

// SharedFiles are the four fds of one end of a process-shared channel, for
// a child process to inherit (ExportFiles). They are this process's copies:
// Close them once the child has started, or the channel never learns of
// the child's death.
type SharedFiles struct {
	// Side is the side the process that imports the files gets.
	Side Side
	// Mem is the channel's memory (a sealed memfd); RecvBell and SendBell
	// its doorbells (eventfds); Link the link to this process (one end of a
	// socket pair), whose hang-up tells either process of the other's
	// death.
	Mem, RecvBell, SendBell, Link *os.File
}

// ExportFiles returns the fds of the other end of this process-shared
// channel, for a child process to inherit: pass them with PassTo (or put
// them in exec.Cmd.ExtraFiles yourself), start the child, then Close them
// here. The child takes them with ImportEnv (or ImportFiles). The same
// rule as SendTo for when it is allowed (ErrAttached).
func (c *Chan) ExportFiles() (*SharedFiles, error) {
	if !c.use(refOther) {
		return nil, ErrReleased
	}
	defer c.done(refOther)
	var fds C.eventq_shared_fds
	if rc, text := cCall(func() C.int {
		return C.eventq_chan_export_fds(c.ptr, &fds, C.sizeof_struct_eventq_shared_fds)
	}); rc < 0 {
		return nil, withText(chanErr(rc), text)
	}
	// The eventfds are O_NONBLOCK: os.NewFile puts them in the netpoller
	// and Fd (which exec.Cmd calls) leaves them so; it would make them
	// blocking, in both processes, only for a file Go made non-blocking.
	return &SharedFiles{
		Side:     Side(fds.side),
		Mem:      os.NewFile(uintptr(fds.mem), "eventq-mem"),
		RecvBell: os.NewFile(uintptr(fds.recv_bell), "eventq-recv-bell"),
		SendBell: os.NewFile(uintptr(fds.send_bell), "eventq-send-bell"),
		Link:     os.NewFile(uintptr(fds.link), "eventq-link"),
	}, nil
}

func (s *SharedFiles) files() []*os.File {
	return []*os.File{s.Mem, s.RecvBell, s.SendBell, s.Link}
}

// Close closes this process's copies of the files. Closing again does
// nothing.
func (s *SharedFiles) Close() error {
	var errs []error
	for _, f := range s.files() {
		if f != nil {
			if err := f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// PassTo makes cmd's process inherit the files and tells it where they
// are: it appends them to cmd.ExtraFiles and adds the environment
// variable name to cmd.Env (starting from os.Environ() if cmd.Env is nil,
// as cmd would), with the fd numbers the files get in the child, in the
// form "side:mem,recv_bell,send_bell,link" (for example "recv:3,4,5,6").
// The child calls ImportEnv(name); the Python binding's
// eventq.Chan.import_fds reads the same form. Call PassTo before
// cmd.Start, and Close the files once cmd has started.
func (s *SharedFiles) PassTo(cmd *exec.Cmd, name string) {
	first := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, s.files()...)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s:%d,%d,%d,%d", name, s.Side, first, first+1, first+2, first+3))
}

// ImportFiles takes an end of a process-shared channel from files another
// process exported (ExportFiles, eventq_chan_export_fds), checked as
// RecvChanFrom checks what it receives (ErrBrokenProtocol). It takes the
// files over: they are closed when it returns, whatever it returns (the
// channel keeps duplicates).
func ImportFiles(s *SharedFiles) (*Chan, error) {
	defer s.Close()
	fds := C.eventq_shared_fds{side: C.int(s.Side), mem: -1, recv_bell: -1, send_bell: -1, link: -1}
	slots := []*C.int{&fds.mem, &fds.recv_bell, &fds.send_bell, &fds.link}
	for i, f := range s.files() {
		fd, err := dupOf(f)
		if err != nil {
			for _, done := range slots[:i] {
				syscall.Close(int(*done))
			}
			return nil, err
		}
		*slots[i] = C.int(fd)
	}
	return importFds(&fds)
}

// dupOf duplicates f's fd (close-on-exec) without calling f.Fd, which
// would make a file Go made non-blocking blocking.
func dupOf(f *os.File) (int, error) {
	if f == nil {
		return -1, syscall.EBADF
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(sysfd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, sysfd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			dupErr = os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", e)
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	return fd, dupErr
}

// ImportEnv takes the end of a process-shared channel that the parent
// passed to this process with SharedFiles.PassTo(cmd, name): it reads the
// fd numbers from the environment variable name ("side:mem,recv_bell,
// send_bell,link", e.g. "send:3,4,5,6"), marks them close-on-exec (so a
// program this one runs does not hold the channel), and takes them over
// as ImportFiles does. A variable that is missing or not of that form
// gives an error wrapping syscall.EINVAL.
func ImportEnv(name string) (*Chan, error) {
	spec, ok := os.LookupEnv(name)
	if !ok {
		return nil, fmt.Errorf("eventq: %s is not set (the parent sets it with SharedFiles.PassTo): %w", name, syscall.EINVAL)
	}
	fds, ok := parseSpec(spec)
	if !ok {
		return nil, fmt.Errorf("eventq: %s=%q: want side:mem,recv_bell,send_bell,link, e.g. send:3,4,5,6: %w", name, spec, syscall.EINVAL)
	}
	for _, fd := range []C.int{fds.mem, fds.recv_bell, fds.send_bell, fds.link} {
		syscall.CloseOnExec(int(fd))
	}
	return importFds(&fds)
}

// parseSpec reads "side:mem,recv_bell,send_bell,link".
func parseSpec(spec string) (C.eventq_shared_fds, bool) {
	var fds C.eventq_shared_fds
	side, list, ok := strings.Cut(spec, ":")
	nums := strings.Split(list, ",")
	switch {
	case !ok || len(nums) != 4:
		return fds, false
	case side == SideSend.String():
		fds.side = C.EVENTQ_SIDE_SEND
	case side == SideRecv.String():
		fds.side = C.EVENTQ_SIDE_RECV
	default:
		return fds, false
	}
	for i, slot := range []*C.int{&fds.mem, &fds.recv_bell, &fds.send_bell, &fds.link} {
		n, err := strconv.Atoi(nums[i])
		if err != nil || n < 0 {
			return fds, false
		}
		*slot = C.int(n)
	}
	return fds, true
}

// importFds makes a Chan of the fds, which eventq_chan_import_fds owns on
// every path.
func importFds(fds *C.eventq_shared_fds) (*Chan, error) {
	var p *C.eventq_chan
	if rc, text := cCall(func() C.int {
		return C.eventq_chan_import_fds(fds, C.sizeof_struct_eventq_shared_fds, &p)
	}); rc < 0 {
		return nil, withText(chanErr(rc), text)
	}
	return wrapChan(p), nil
}

// Consumer is a consumer counted in on a channel (Chan.Consumer) until it
// calls Leave.
type Consumer struct {
	p    *C.eventq_chan // a handle of its own, so Leave works after Release
	left atomic.Bool
}

// Consumer counts a consumer in on the channel: a goroutine, thread or
// loop that waits on the receive fd and will call Leave when it stops
// taking messages. Leaving while messages remain and another consumer is
// counted wakes one more waiter, so a wake-up the leaver took (and will
// not act on) passes on (D4).
//
// It matters for consumers that poll the receive fd with EPOLLEXCLUSIVE
// (RecvFile in an epoll set of their own; libeventq loops, which count
// themselves), where one write wakes one waiter. Goroutines waiting in
// Recv all wake on each write (each polls its own duplicate of the fd),
// and so does every consumer of a process-shared channel (its fd is an
// epoll fd, which refuses EPOLLEXCLUSIVE), so counting them is not needed
// but harmless; a worker pool that mixes them with exclusive pollers
// counts every worker in:
//
//	k, err := ch.Consumer()
//	if err != nil {
//		return err
//	}
//	defer k.Leave()
//
// The Consumer holds its own reference to the channel until Leave (a
// finalizer leaves for a forgotten one, as a backstop).
func (c *Chan) Consumer() (*Consumer, error) {
	p, err := c.clonePtr()
	if err != nil {
		return nil, err
	}
	if rc := C.eventq_chan_consumer_enter(p); rc < 0 {
		C.eventq_chan_free(p)
		return nil, chanErr(rc)
	}
	k := &Consumer{p: p}
	runtime.SetFinalizer(k, (*Consumer).Leave)
	return k, nil
}

// Leave counts the consumer out (see Chan.Consumer). Leaving again does
// nothing and returns nil.
func (k *Consumer) Leave() error {
	if k.left.Swap(true) {
		return nil
	}
	runtime.SetFinalizer(k, nil)
	rc := C.eventq_chan_consumer_leave(k.p)
	C.eventq_chan_free(k.p)
	return chanErr(rc)
}
