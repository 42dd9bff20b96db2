# SPDX-License-Identifier: MIT OR Apache-2.0
"""Ctrl-C: a child Python process blocked in a receive or a send gets SIGINT.
It raises KeyboardInterrupt, and nothing was taken or queued by the
interrupted call: what is sent afterwards is received, exactly once.

The parent sends the signal once the child says it is about to wait and,
where /proc shows it, once the child's main thread sleeps in poll.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# A process started with SIGINT ignored (as a shell's background job is)
# passes that on, and Python then raises no KeyboardInterrupt: the child
# installs Python's handler itself.
PRELUDE = """
import asyncio, os, signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)
import eventq
def say(line):
    os.write(1, (line + "\\n").encode())
"""


def spawn(body: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )


def wait_until_asleep_in_poll(pid: int) -> None:
    """Spins until the process's main thread sleeps in poll/epoll (kernel
    wchan), where /proc tells; a hang is caught by the watchdog."""
    path = f"/proc/{pid}/wchan"
    while True:
        try:
            with open(path) as f:
                wchan = f.read()
        except OSError:
            return
        if wchan in ("", "0"):  # not shown on this kernel: send anyway
            return
        if "poll" in wchan:
            return
        os.sched_yield()


def interrupt_once(body: str) -> list[str]:
    child = spawn(body)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line == "ready\n", line + child.stderr.read()  # type: ignore[union-attr]
    wait_until_asleep_in_poll(child.pid)
    os.kill(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, f"exit {child.returncode}\n{out}\n{err}"
    return out.splitlines()


def test_blocked_receive() -> None:
    out = interrupt_once(
        """
        ch = eventq.Chan()
        try:
            say("ready")
            ch.recv()
            say("returned?")
        except KeyboardInterrupt:
            say("interrupted")
        assert ch.stats().received == 0
        ch.send(b"after")
        assert ch.recv(timeout=0) == b"after"
        st = ch.stats()
        assert (st.sent, st.received, st.pending) == (1, 1, 0)
        say("ok")
        """
    )
    assert out == ["interrupted", "ok"]


def test_blocked_receive_with_a_timeout() -> None:
    out = interrupt_once(
        """
        ch = eventq.Chan()
        try:
            say("ready")
            ch.recv_batch(timeout=3600)
        except KeyboardInterrupt:
            say("interrupted")
        ch.send(b"after")
        assert ch.recv_batch(timeout=0) == [b"after"]
        say("ok")
        """
    )
    assert out == ["interrupted", "ok"]


def test_blocked_send() -> None:
    out = interrupt_once(
        """
        ch = eventq.Chan(1)
        ch.send(b"fills it")
        try:
            say("ready")
            ch.send(b"refused")
            say("returned?")
        except KeyboardInterrupt:
            say("interrupted")
        st = ch.stats()
        assert (st.sent, st.pending) == (1, 1), st  # the interrupted send queued nothing
        assert ch.recv() == b"fills it"
        ch.send(b"after")
        assert ch.recv() == b"after"
        say("ok")
        """
    )
    assert out == ["interrupted", "ok"]


def test_signal_taken_by_another_thread() -> None:
    """SIGINT delivered to a non-main thread: the main thread, blocked in
    poll, sees it at the end of its current slice."""
    child = spawn(
        """
        ch = eventq.Chan()
        main_tid = threading.main_thread().native_id
        def poke():
            path = f"/proc/self/task/{main_tid}/wchan"
            while True:
                w = open(path).read()
                if w in ("", "0") or "poll" in w:
                    break
                os.sched_yield()
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # this thread, not main
        t = threading.Thread(target=poke)
        try:
            t.start()
            ch.recv()
        except KeyboardInterrupt:
            say("interrupted")
        t.join()
        ch.send(b"after")
        assert ch.recv(0) == b"after" and ch.stats().received == 1
        say("ok")
        """
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.splitlines() == ["interrupted", "ok"]


def test_asyncio_receive() -> None:
    """asyncio.run turns SIGINT into cancelling the waiting receive, then
    raises KeyboardInterrupt; the cancelled receive took nothing."""
    out = interrupt_once(
        """
        ch = eventq.Chan()
        async def main():
            say("ready")
            await ch.recv_async()
        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            say("interrupted")
        assert ch.stats().received == 0
        ch.send(b"after")
        assert ch.recv(0) == b"after"
        say("ok")
        """
    )
    assert out == ["interrupted", "ok"]


def test_repeated_interrupts_of_a_busy_stream_lose_nothing() -> None:
    """A producer thread streams numbered messages; the main thread receives
    them and is interrupted again and again, at whatever point of recv() it
    is (in poll, in the library call, between the call and the return).
    Every message is received exactly once, in order."""
    interrupts = 100
    child = spawn(
        """
        N = 300_000
        ch = eventq.Chan(64)
        def produce():
            with ch.clone() as tx:  # closes the channel at the end
                for i in range(N):
                    tx.send(i.to_bytes(4, "little"))
        threading.Thread(target=produce).start()
        got = []
        interrupts = 0
        while True:
            try:
                say("ready")  # the parent sends one SIGINT per line
                while True:
                    got.append(ch.recv())
            except KeyboardInterrupt:
                interrupts += 1
            except eventq.ClosedError:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late SIGINT must not hit the checks
                break
        assert [int.from_bytes(m, "little") for m in got] == list(range(N))
        say(f"ok {interrupts}")
        """
    )
    assert child.stdout is not None
    sent = 0
    lines = []
    for line in child.stdout:
        lines.append(line.strip())
        if line == "ready\n" and sent < interrupts:
            os.kill(child.pid, signal.SIGINT)
            sent += 1
    child.wait(timeout=60)
    err = child.stderr.read()  # type: ignore[union-attr]
    assert child.returncode == 0, err
    assert lines[-1] == f"ok {sent}" and sent >= 1
