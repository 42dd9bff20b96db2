// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// Process-shared channels through the binding, with real processes: the
// test binary runs again as the other process (TestSharedChild), and gets
// the channel over a Unix socket (SendTo, RecvChanFrom) or as inherited
// files (ExportFiles, PassTo, ImportEnv). Every wait has a watchdog, so a
// lost wake-up or an unseen death fails the test instead of hanging it.

const (
	childEnv = "EVENTQ_TEST_CHILD" // the child's role, words as below
	chanEnv  = "EVENTQ_TEST_CHAN"  // the inherited channel (PassTo)
)

// TestSharedChild is not a test: it is the child process of the tests
// below, active only with EVENTQ_TEST_CHILD set to
//
//	send socket|env COUNT close|hang   two goroutines send COUNT messages
//	                                   each (producer 0 one per Send,
//	                                   producer 1 in SendBatch calls of
//	                                   16), then close the channel, or say
//	                                   "sent" and wait to be killed
//	recv env                           receive one message, say "got" and
//	                                   wait to be killed
//
// taking the channel's end over the Unix socket at fd 3 (socket) or from
// EVENTQ_TEST_CHAN (env).
func TestSharedChild(t *testing.T) {
	args := strings.Fields(os.Getenv(childEnv))
	if len(args) == 0 {
		return
	}
	if err := sharedChild(args); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func sharedChild(args []string) error {
	ctx := context.Background()
	ch, err := childChan(args[1])
	if err != nil {
		return err
	}
	switch args[0] {
	case "send":
		per, _ := strconv.Atoi(args[2])
		if err := sendBoth(ctx, ch, uint64(per)); err != nil {
			return err
		}
		if args[3] == "close" {
			return ch.Close()
		}
		fmt.Println("sent")
	case "recv":
		if _, err := ch.Recv(ctx); err != nil {
			return err
		}
		fmt.Println("got")
	}
	_, err = io.Copy(io.Discard, os.Stdin) // until killed
	return err
}

func childChan(how string) (*eventq.Chan, error) {
	if how == "env" {
		return eventq.ImportEnv(chanEnv)
	}
	f := os.NewFile(3, "eventq-test-sock")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return eventq.RecvChanFrom(conn.(*net.UnixConn))
}

// sendBoth sends per messages as producer 0 (Send) and per as producer 1
// (SendBatch), from two goroutines.
func sendBoth(ctx context.Context, ch *eventq.Chan, per uint64) error {
	errs := make([]error, 2)
	goN(2, func(p int) {
		if p == 0 {
			for seq := uint64(0); seq < per && errs[0] == nil; seq++ {
				errs[0] = ch.Send(ctx, makeMsg(0, seq))
			}
			return
		}
		for seq := uint64(0); seq < per && errs[1] == nil; seq += 16 {
			var batch [][]byte
			for s := seq; s < min(seq+16, per); s++ {
				batch = append(batch, makeMsg(1, s))
			}
			_, errs[1] = ch.SendBatch(ctx, batch)
		}
	})
	return errors.Join(errs...)
}

// watchdog is the context of a test between processes: at its deadline,
// far beyond a normal run, waits fail and children are killed.
func watchdog(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// unixPair returns the two ends of a connected Unix socket: this process's
// as a *net.UnixConn, the child's as a file for ExtraFiles.
func unixPair(t *testing.T) (*net.UnixConn, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "eventq-test-sock")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "eventq-test-sock")
}

// connPair is unixPair with both ends in this process, as conns.
func connPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	mine, theirs := unixPair(t)
	other, err := net.FileConn(theirs)
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return mine, other.(*net.UnixConn)
}

// child is a process of the tests: its stdout read line by line, its
// stdin held open (a "hang" child waits on it), its stderr kept for the
// failure message.
type child struct {
	cmd    *exec.Cmd
	out    *bufio.Scanner
	stdin  io.WriteCloser
	stderr bytes.Buffer
}

// startChild starts cmd, to which the caller gave its files, then closes
// this process's copies of them (files). The child is killed at cleanup,
// if it still runs.
func startChild(t *testing.T, cmd *exec.Cmd, files ...io.Closer) *child {
	t.Helper()
	c := &child{cmd: cmd}
	cmd.Stderr = &c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

// testCmd is this test binary run again as the child with role (see
// TestSharedChild), killed at ctx's deadline.
func testCmd(ctx context.Context, role string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSharedChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	return cmd
}

// startWithSocket starts cmd with one end of a new socket pair at fd 3,
// and returns the child and this process's end.
func startWithSocket(t *testing.T, cmd *exec.Cmd) (*child, *net.UnixConn) {
	t.Helper()
	mine, theirs := unixPair(t)
	cmd.ExtraFiles = []*os.File{theirs}
	return startChild(t, cmd, theirs), mine
}

// startWithEnd starts cmd inheriting the other end of ch (ExportFiles,
// PassTo as EVENTQ_TEST_CHAN).
func startWithEnd(t *testing.T, ch *eventq.Chan, cmd *exec.Cmd) *child {
	t.Helper()
	files, err := ch.ExportFiles()
	if err != nil {
		t.Fatal(err)
	}
	files.PassTo(cmd, chanEnv)
	return startChild(t, cmd, files)
}

// expect reads the child's next line, which must be want.
func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	if !c.out.Scan() || c.out.Text() != want {
		c.cmd.Process.Kill()
		c.cmd.Wait() // stderr is complete once Wait returns
		t.Fatalf("child said %q (%v), want %q; stderr: %s", c.out.Text(), c.out.Err(), want, c.stderr.String())
	}
}

// wait waits for the child, which must exit 0.
func (c *child) wait(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("child: %v; stderr: %s", err, c.stderr.String())
	}
}

// kill kills the child with SIGKILL and reaps it: once this returns, its
// end of the channel is gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait()
}

// receiveAll receives from rx until end of stream, with one goroutine per
// Recv and one per RecvBatch, into a tracker of 2 producers of per
// messages each, and checks D1-D3.
func receiveAll(ctx context.Context, t *testing.T, rx *eventq.Chan, per uint64) {
	t.Helper()
	tr := newTracker(2, per)
	goN(2, func(i int) {
		if i == 0 {
			drain(ctx, t, rx, tr.consumer())
			return
		}
		drainBatches(ctx, t, rx, tr.consumer(), 64)
	})
	tr.verify(t)
	totalMessages.Add(2 * int64(per))
}

// The receiving end made here, the sending end handed to a child over a
// socket; every message crosses exactly once, whole, in its producer's
// order (the child sends from two goroutines), and the child's Close ends
// the stream. The ring is small, so both processes wait on each other in
// the netpoller.
func TestSharedHandoverOverSocket(t *testing.T) {
	const per = 5000
	ctx := watchdog(t)
	rx := newSharedChan(t, eventq.SideRecv, eventq.WithCapacity(32))
	c, mine := startWithSocket(t, testCmd(ctx, fmt.Sprintf("send socket %d close", per)))
	if err := rx.SendTo(mine); err != nil {
		t.Fatal(err)
	}
	receiveAll(ctx, t, rx, per)
	c.wait(t)
}

// The sending child inherits its end (ExportFiles, PassTo, ImportEnv) and
// is killed with SIGKILL after its last send: a Recv parked in the
// netpoller wakes with end of stream, after every message.
func TestSharedEndOfStreamWhenSenderKilled(t *testing.T) {
	const per = 100
	ctx := watchdog(t)
	rx := newSharedChan(t, eventq.SideRecv, eventq.WithCapacity(16))
	c := startWithEnd(t, rx, testCmd(ctx, fmt.Sprintf("send env %d hang", per)))
	next := [2]uint64{}
	for range 2 * per {
		msg, err := rx.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, seq, ok := checkMsg(msg)
		if !ok || p > 1 || seq != next[p] {
			t.Fatalf("D1-D3: got (%d, %d, %v), want seq %d", p, seq, ok, next[p])
		}
		next[p]++
	}
	c.expect(t, "sent")

	result := whenParked(t, rx, false, func() error {
		_, err := rx.Recv(ctx)
		return err
	})
	c.kill(t)
	if err := result(); !errors.Is(err, eventq.ErrClosed) {
		t.Fatalf("Recv after the sender died: %v, want end of stream", err)
	}
	if _, err := rx.TryRecv(); !errors.Is(err, eventq.ErrClosed) {
		t.Fatalf("TryRecv after end of stream: %v", err)
	}
}

// The receiving child takes one message; the ring is filled again, and a
// Send parked in the netpoller on the full ring wakes with ErrClosed when
// the child is SIGKILLed, instead of waiting for ever. The end handed to a
// successor holds every message the dead one had not taken, and not the
// refused one.
func TestSharedSendFailsWhenReceiverKilled(t *testing.T) {
	const capacity = 8
	ctx := watchdog(t)
	tx := newSharedChan(t, eventq.SideSend, eventq.WithCapacity(capacity))
	c := startWithEnd(t, tx, testCmd(ctx, "recv env"))
	if err := tx.Send(ctx, makeMsg(0, 0)); err != nil {
		t.Fatal(err)
	}
	c.expect(t, "got")
	for seq := uint64(1); seq <= capacity; seq++ {
		if err := tx.TrySend(makeMsg(0, seq)); err != nil {
			t.Fatalf("send %d into the room the child made: %v", seq, err)
		}
	}
	result := whenParked(t, tx, true, func() error { return tx.Send(ctx, makeMsg(0, capacity+1)) })
	c.kill(t)
	if err := result(); !errors.Is(err, eventq.ErrClosed) {
		t.Fatalf("Send on the full ring of a dead receiver: %v, want ErrClosed", err)
	}

	rx := takeOver(t, tx)
	for want := uint64(1); want <= capacity; want++ {
		msg, err := rx.TryRecv()
		if _, got, ok := checkMsg(msg); err != nil || !ok || got != want {
			t.Fatalf("successor: (%d, %v, %v), want seq %d", got, ok, err, want)
		}
	}
	if _, err := rx.TryRecv(); !errors.Is(err, eventq.ErrWouldBlock) {
		t.Fatalf("successor, after the rest: %v, want ErrWouldBlock", err)
	}
}

// whenParked runs call, a Send (send) or a Recv on ch, in a goroutine,
// and returns once it is parked in the netpoller; the function it returns
// waits for call's error.
func whenParked(t *testing.T, ch *eventq.Chan, send bool, call func() error) (result func() error) {
	parked := make(chan struct{})
	var once sync.Once
	eventq.SetParkHook(ch, func(s bool) {
		if s == send {
			once.Do(func() { close(parked) })
		}
	})
	t.Cleanup(func() { eventq.SetParkHook(ch, nil) })
	done := make(chan error, 1)
	go func() { done <- call() }()
	<-parked
	return func() error { return <-done }
}

// takeOver takes the other end of ch over a socket pair in this same
// process (two mappings of one memfd, as two processes would have).
func takeOver(t *testing.T, ch *eventq.Chan) *eventq.Chan {
	t.Helper()
	a, b := connPair(t)
	if err := ch.SendTo(a); err != nil {
		t.Fatal(err)
	}
	other, err := eventq.RecvChanFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Release() })
	return other
}

// sharedPair is a shared channel with side made here, and its other end.
func sharedPair(t *testing.T, made eventq.Side, opts ...eventq.Option) (mine, other *eventq.Chan) {
	t.Helper()
	mine = newSharedChan(t, made, opts...)
	return mine, takeOver(t, mine)
}

func TestSharedSidesAndErrors(t *testing.T) {
	if _, err := eventq.NewSharedChan(eventq.Side(3)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a bad side: %v", err)
	}
	if _, err := eventq.NewSharedChan(eventq.SideSend, eventq.WithMaxBytes(100)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a byte limit: %v", err)
	}
	local := newChan(t)
	if s := local.Side(); s != 0 || s.String() != "none" {
		t.Errorf("in-process Side() = %v", s)
	}
	a, _ := unixPair(t)
	if err := local.SendTo(a); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("SendTo of an in-process channel: %v", err)
	}
	lone, gone := unixPair(t)
	gone.Close()
	made := newSharedChan(t, eventq.SideSend)
	if err := made.SendTo(lone); !errors.Is(err, syscall.EPIPE) || errors.Is(err, eventq.ErrClosed) {
		t.Errorf("SendTo a socket whose other end is closed: %v", err)
	}
	if _, err := local.ExportFiles(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ExportFiles of an in-process channel: %v", err)
	}

	tx, rx := sharedPair(t, eventq.SideSend, eventq.WithCapacity(4))
	if tx.Side() != eventq.SideSend || rx.Side() != eventq.SideRecv || tx.Side().String() != "send" {
		t.Fatalf("sides %v, %v", tx.Side(), rx.Side())
	}
	if _, err := tx.TryRecv(); !errors.Is(err, eventq.ErrWrongSide) || !errors.Is(err, syscall.EPERM) {
		t.Errorf("receive on the sending end: %v", err)
	}
	if err := rx.TrySend([]byte("x")); !errors.Is(err, eventq.ErrWrongSide) {
		t.Errorf("send on the receiving end: %v", err)
	}
	if err := tx.SendTo(a); !errors.Is(err, eventq.ErrAttached) || !errors.Is(err, syscall.EISCONN) {
		t.Errorf("a second handover while the first taker lives: %v", err)
	}
	if _, err := tx.ExportFiles(); !errors.Is(err, eventq.ErrAttached) {
		t.Errorf("an export while the first taker lives: %v", err)
	}
	if err := tx.TrySend(make([]byte, 4097)); !errors.Is(err, eventq.ErrTooLarge) {
		t.Errorf("the default limit of a shared channel is 4096: %v", err)
	}
	if err := tx.TrySend([]byte("whole")); err != nil {
		t.Fatal(err)
	}
	if msg, err := rx.TryRecv(); err != nil || string(msg) != "whole" {
		t.Fatalf("TryRecv: %q, %v", msg, err)
	}
}

// What RecvChanFrom, ImportFiles and ImportEnv are given is checked.
func TestSharedHandoverChecks(t *testing.T) {
	mine, other := connPair(t)
	// Nothing sent yet: the wait ends at the read deadline, in the
	// netpoller (the socket stays non-blocking).
	mine.SetReadDeadline(time.Now())
	if _, err := eventq.RecvChanFrom(mine); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("RecvChanFrom before a handover, at the deadline: %v", err)
	}
	mine.SetReadDeadline(time.Time{})
	// A message that is not a handover.
	if _, err := other.Write(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if _, err := eventq.RecvChanFrom(mine); !errors.Is(err, eventq.ErrBrokenProtocol) || !errors.Is(err, syscall.EPROTO) {
		t.Fatalf("RecvChanFrom of a plain message: %v", err)
	}

	// Exported files, taken in this process; ImportFiles closes them.
	tx := newSharedChan(t, eventq.SideSend)
	files, err := tx.ExportFiles()
	if err != nil || files.Side != eventq.SideRecv {
		t.Fatalf("ExportFiles: side %v, %v", files.Side, err)
	}
	rx, err := eventq.ImportFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Release()
	if err := files.Mem.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ImportFiles left the files open: %v", err)
	}
	if err := tx.TrySend([]byte("inherited")); err != nil {
		t.Fatal(err)
	}
	if msg, err := rx.TryRecv(); err != nil || string(msg) != "inherited" {
		t.Fatalf("TryRecv: %q, %v", msg, err)
	}

	for _, v := range []string{"", "send", "send:1,2,3", "both:3,4,5,6", "recv:3,4,x,6", "recv:-1,4,5,6"} {
		t.Setenv(chanEnv, v)
		if _, err := eventq.ImportEnv(chanEnv); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("ImportEnv(%q): %v", v, err)
		}
	}
	os.Unsetenv(chanEnv)
	if _, err := eventq.ImportEnv(chanEnv); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ImportEnv unset: %v", err)
	}
}

// leaverHandsOn runs 3 consumers, each counted in (Chan.Consumer) and
// waiting on rx's receive fd in an epoll set of its own (with
// EPOLLEXCLUSIVE when exclusive: one wakes per write). The first to wake
// leaves without receiving; the others receive until end of stream,
// which the one that takes the 10th message makes. send then sends the
// 10 messages. Returns how many were received. Without the hand-on of the
// leaver's wake-up, the exclusive burst is left to nobody and the
// consumers' waits end at the watchdog.
func leaverHandsOn(ctx context.Context, t *testing.T, rx *eventq.Chan, exclusive bool, send func()) int64 {
	const consumers = 3
	var woken, received atomic.Int64
	var ready sync.WaitGroup
	ready.Add(consumers)
	fd := rx.RecvFd()
	deadline, _ := ctx.Deadline()
	goN(consumers+1, func(i int) {
		if i == consumers {
			ready.Wait()
			send()
			return
		}
		k, err := rx.Consumer()
		if err != nil {
			t.Error(err)
			ready.Done()
			return
		}
		defer k.Leave()
		ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			t.Error(err)
			ready.Done()
			return
		}
		defer syscall.Close(ep)
		events := uint32(syscall.EPOLLIN)
		if exclusive {
			events |= 1 << 28 // EPOLLEXCLUSIVE
		}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: events}); err != nil {
			t.Error(err)
			ready.Done()
			return
		}
		ready.Done()
		evs := make([]syscall.EpollEvent, 1)
		for {
			n, err := syscall.EpollWait(ep, evs, int(time.Until(deadline).Milliseconds()))
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n != 1 {
				t.Errorf("lost wake-up: a consumer slept through work (%d, %v)", n, err)
				return
			}
			if woken.Add(1) == 1 {
				k.Leave() // woken first: leaves without receiving
				return
			}
			for {
				_, err := rx.TryRecv()
				switch {
				case err == nil:
					if received.Add(1) == 10 {
						rx.Close()
					}
					continue
				case errors.Is(err, eventq.ErrClosed):
					return
				case !errors.Is(err, eventq.ErrWouldBlock):
					t.Error(err)
					return
				}
				break
			}
		}
	})
	return received.Load()
}

// A consumer that leaves hands its wake-up on: in one process, where the
// consumers wait exclusively (this hangs without the hand-on), and on a
// shared channel whose sender is another process (every consumer wakes).
func TestSharedConsumerLeaveHandsOn(t *testing.T) {
	ctx := watchdog(t)
	for range 10 {
		ch := newChan(t, eventq.WithCapacity(64))
		got := leaverHandsOn(ctx, t, ch, true, func() {
			for i := range 10 {
				if err := ch.TrySend([]byte{byte(i)}); err != nil {
					t.Error(err)
				}
			}
		})
		if got != 10 {
			t.Fatalf("in one process: %d received, want 10", got)
		}
	}
	rx := newSharedChan(t, eventq.SideRecv, eventq.WithCapacity(64))
	c, mine := startWithSocket(t, testCmd(ctx, "send socket 5 hang"))
	got := leaverHandsOn(ctx, t, rx, false, func() {
		// The child waits for its end, then sends.
		if err := rx.SendTo(mine); err != nil {
			t.Error(err)
		}
	})
	if got != 10 {
		t.Fatalf("between processes: %d received, want 10", got)
	}
	c.expect(t, "sent")
}

// Leaving writes the receive fd only when messages remain and another
// consumer is counted (RecvDoorbellRings counts the writes).
func TestConsumerLeaveWritesOnlyForAnother(t *testing.T) {
	local := newChan(t, eventq.WithCapacity(8))
	tx, rx := sharedPair(t, eventq.SideSend, eventq.WithCapacity(8))
	for _, tc := range []struct {
		name   string
		tx, rx *eventq.Chan
	}{{"in-process", local, local}, {"shared", tx, rx}} {
		t.Run(tc.name, func(t *testing.T) {
			rings := func() uint64 {
				t.Helper()
				st, err := tc.rx.Stats()
				if err != nil {
					t.Fatal(err)
				}
				return st.RecvDoorbellRings
			}
			consumer := func() *eventq.Consumer {
				t.Helper()
				k, err := tc.rx.Consumer()
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			if err := tc.tx.TrySend([]byte("x")); err != nil {
				t.Fatal(err)
			}
			before := rings()
			if err := consumer().Leave(); err != nil || rings() != before {
				t.Fatalf("alone: %v, %d writes, want none", err, rings()-before)
			}
			stays, k := consumer(), consumer()
			if err := k.Leave(); err != nil || rings() != before+1 {
				t.Fatalf("another stays: %v, %d writes, want 1", err, rings()-before)
			}
			if err := k.Leave(); err != nil || rings() != before+1 {
				t.Fatalf("a second Leave: %v, %d writes, want none more", err, rings()-before-1)
			}
			if _, err := tc.rx.TryRecv(); err != nil {
				t.Fatal(err)
			}
			if err := consumer().Leave(); err != nil || rings() != before+1 {
				t.Fatalf("nothing pending: %v, %d writes, want none more", err, rings()-before-1)
			}
			stays.Leave()
		})
	}
}
