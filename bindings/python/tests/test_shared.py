# SPDX-License-Identifier: MIT OR Apache-2.0
"""Process-shared channels with real processes: handover over a Unix socket
and by inherited fds (subprocess pass_fds), every message exactly once and
in order, end of stream when the sending process is killed, a send that
stops waiting when the receiving one is, an asyncio consumer, the sides and
errors, consumer counting; and the C producer process (tests/cross) into an
asyncio consumer.

Every wait has a timeout and pytest-timeout guards each test, so a lost
wake-up or an unseen death fails instead of hanging. `await asyncio.sleep(0)`
is a yield to the loop (a started task runs up to its wait), not a timed
sleep.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import pytest

import eventq
from conftest import HERE, Checker, encode, encode_checked

CHILD = str(HERE / "shared_child.py")
WATCHDOG = 30.0  # seconds: only a hang takes this long


class Child:
    """A process of the tests: stdin held open (a "hang" child waits on it),
    stdout read line by line, stderr kept for the failure message."""

    def __init__(self, argv: list[str], *, pass_fds: tuple[int, ...] = (), env: Optional[dict[str, str]] = None):
        self.proc = subprocess.Popen(
            argv,
            pass_fds=pass_fds,
            env={**os.environ, **(env or {})},
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def expect(self, line: str) -> None:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got == line, f"child said {got!r}, want {line!r}; stderr: {self.stderr()}"

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def wait(self) -> None:
        """The child must exit 0."""
        out, err = self.proc.communicate(timeout=WATCHDOG)
        assert self.proc.returncode == 0, f"child exited {self.proc.returncode}: {err}"

    def kill(self) -> None:
        """SIGKILL, and reaped: once this returns its end is gone."""
        self.proc.kill()
        self.proc.communicate(timeout=WATCHDOG)


@pytest.fixture
def children() -> Any:
    """Starts children (Child's arguments); kills what is left at the end."""
    started: list[Child] = []

    def start(*args: Any, **kw: Any) -> Child:
        c = Child(*args, **kw)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.kill()


def python_child(*args: Any) -> list[str]:
    return [sys.executable, CHILD, *map(str, args)]


def pair(side: eventq.Side, **kw: Any) -> tuple[eventq.Chan, eventq.Chan]:
    """A shared channel made here with `side`, and its other end taken over
    a socket pair in this same process (two mappings of one memfd)."""
    made = eventq.Chan.new_shared(side=side, **kw)
    a, b = socket.socketpair()
    with a, b:
        made.send_to(a)
        return made, eventq.Chan.recv_from(b, timeout=WATCHDOG)


def receive_all(rx: eventq.Chan, chk: Checker) -> None:
    """Blocking receives until end of stream."""
    while True:
        try:
            chk.check(rx.recv(timeout=WATCHDOG))
        except eventq.ClosedError:
            return


def test_handover_over_a_socket_to_a_child(children: Any) -> None:
    per = 2000
    with eventq.Chan.new_shared(32, side=eventq.Side.RECV) as rx:
        assert rx.side is eventq.Side.RECV
        mine, theirs = socket.socketpair()
        with mine, theirs:
            child = children(python_child("send", "socket", theirs.fileno(), per, "close"), pass_fds=(theirs.fileno(),))
            theirs.close()
            rx.send_to(mine)
        chk = Checker(2, per)
        receive_all(rx, chk)
        assert chk.complete()
        child.wait()


def test_end_of_stream_when_the_sender_is_killed(children: Any) -> None:
    per = 100
    rx = eventq.Chan.new_shared(16, side=eventq.Side.RECV)
    with rx.export_fds() as fds:
        assert fds.side is eventq.Side.SEND
        child = children(python_child("send", "env", per, "hang"), pass_fds=fds.fds, env={"EVENTQ_TEST_CHAN": str(fds)})
    chk = Checker(2, per)
    for _ in range(2 * per):
        chk.check(rx.recv(timeout=WATCHDOG))
    assert chk.complete()
    child.expect("sent")
    # A thread blocked in the library's receive, and the main thread
    # waiting in poll(): both see end of stream once the child is gone.
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(pytest.raises(eventq.ClosedError, rx.recv, timeout=WATCHDOG)))
    waiter.start()
    child.kill()
    with pytest.raises(eventq.ClosedError):
        rx.recv(timeout=WATCHDOG)
    waiter.join()
    assert result, "the blocked receive did not end with ClosedError"
    assert rx.stats().closed
    rx.release()


def test_a_send_stops_waiting_when_the_receiver_is_killed(children: Any) -> None:
    capacity = 8
    tx = eventq.Chan.new_shared(capacity, side=eventq.Side.SEND)
    with tx.export_fds() as fds:
        child = children(python_child("recv", "env"), pass_fds=fds.fds, env={"EVENTQ_TEST_CHAN": str(fds)})
    tx.send(encode(0, 0))
    child.expect("got")
    for seq in range(1, capacity + 1):
        tx.send(encode(0, seq), timeout=0)  # the room the child made
    # A thread blocked in the library's send and the main thread waiting in
    # poll() on the full ring: both stop waiting with ClosedError once the child
    # is gone.
    result: list[Any] = []
    waiter = threading.Thread(
        target=lambda: result.append(pytest.raises(eventq.ClosedError, tx.send, b"refused", timeout=WATCHDOG))
    )
    waiter.start()
    child.kill()
    with pytest.raises(eventq.ClosedError):
        tx.send(b"refused too", timeout=WATCHDOG)
    waiter.join()
    assert result, "the blocked send did not end with ClosedError"
    # The end goes to a successor, with what the dead one had not taken.
    a, b = socket.socketpair()
    with a, b:
        tx.send_to(a)
        rx = eventq.Chan.recv_from(b, timeout=WATCHDOG)
    assert [rx.recv(timeout=0) for _ in range(capacity)] == [encode(0, 1 + i) for i in range(capacity)]
    with pytest.raises(eventq.WouldBlockError):
        rx.recv(timeout=0)
    tx.release()
    rx.release()


def test_asyncio_consumer_of_a_child(children: Any) -> None:
    per = 2000

    async def main() -> None:
        with eventq.Chan.new_shared(32, side=eventq.Side.RECV) as rx:
            with rx.export_fds() as fds:
                child = children(python_child("send", "env", per, "close"), pass_fds=fds.fds,
                                 env={"EVENTQ_TEST_CHAN": str(fds)})
            chk = Checker(2, per)
            async for m in rx:
                chk.check(m)
            assert chk.complete()
            child.wait()

    asyncio.run(asyncio.wait_for(main(), WATCHDOG))


def test_asyncio_end_of_stream_when_the_sender_is_killed(children: Any) -> None:
    async def main() -> None:
        rx = eventq.Chan.new_shared(16, side=eventq.Side.RECV)
        with rx.export_fds() as fds:
            child = children(python_child("send", "env", 1, "hang"), pass_fds=fds.fds,
                             env={"EVENTQ_TEST_CHAN": str(fds)})
        assert {await rx.recv_async(), await rx.recv_async()} == {encode(0, 0), encode(1, 0)}
        child.expect("sent")
        task = asyncio.create_task(rx.recv_async())
        await asyncio.sleep(0)  # the task waits on the fd (add_reader)
        assert not task.done()
        child.kill()
        with pytest.raises(eventq.ClosedError):
            await task
        rx.release()

    asyncio.run(asyncio.wait_for(main(), WATCHDOG))


def test_sides_and_errors() -> None:
    with pytest.raises(ValueError):
        eventq.Chan.new_shared(4, side=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        eventq.Chan.new_shared(4)  # type: ignore[call-arg]
    with eventq.Chan(4) as local:
        assert local.side is None
        a, b = socket.socketpair()
        with a, b:
            with pytest.raises(eventq.InvalidArgumentError):
                local.send_to(a)
        with pytest.raises(eventq.InvalidArgumentError):
            local.export_fds()
    with eventq.Chan.new_shared(4, side=eventq.Side.SEND) as made:
        a, b = socket.socketpair()
        b.close()
        with a, pytest.raises(BrokenPipeError) as pipe:
            made.send_to(a)
        assert not isinstance(pipe.value, eventq.ClosedError)
    tx, rx = pair(eventq.Side.SEND, capacity=4)
    assert (tx.side, rx.side) == (eventq.Side.SEND, eventq.Side.RECV)
    assert str(tx.side) == "send" and "side=recv" in repr(rx)
    with pytest.raises(eventq.WrongSideError) as e:
        tx.recv(timeout=0)
    assert isinstance(e.value, PermissionError) and "only sends, or only receives" in str(e.value)
    with pytest.raises(PermissionError):
        rx.send(b"x")
    a, b = socket.socketpair()
    with a, b:
        with pytest.raises(eventq.AttachedError):
            tx.send_to(a)
    with pytest.raises(eventq.AttachedError):
        tx.export_fds()
    with pytest.raises(eventq.MessageTooLargeError):
        tx.send(bytes(4097))  # the default limit of a shared channel
    tx.send(b"whole")
    assert rx.recv(timeout=0) == b"whole"
    with pytest.raises(eventq.WouldBlockError):
        rx.recv(timeout=0)
    tx.close()
    with pytest.raises(eventq.ClosedError):
        rx.recv(timeout=0)
    tx.release()
    rx.release()


def test_what_arrives_is_checked() -> None:
    a, b = socket.socketpair()
    with a, b:
        with pytest.raises(eventq.WouldBlockError):
            eventq.Chan.recv_from(b, timeout=0)
        with pytest.raises(eventq.TimeoutError):
            eventq.Chan.recv_from(b, timeout=0.001)
        a.sendall(bytes(16))
        with pytest.raises(eventq.BrokenProtocolError):
            eventq.Chan.recv_from(b)
        a.close()
        with pytest.raises(eventq.BrokenProtocolError):  # end of file
            eventq.Chan.recv_from(b.fileno())
    # Exported fds taken in this process: import_fds owns them.
    tx = eventq.Chan.new_shared(4, side=eventq.Side.SEND)
    fds = tx.export_fds()
    with eventq.Chan.import_fds(fds) as rx:
        assert "closed" in repr(fds)
        fds.close()  # does nothing: the fds are the new Chan's
        tx.send(b"inherited")
        assert rx.recv(timeout=0) == b"inherited"
    with pytest.raises(ValueError):
        eventq.Chan.import_fds(fds)
    for bad in ("", "send", "send:1,2,3", "both:3,4,5,6", "recv:3,4,x,6", "recv:-1,4,5,6"):
        with pytest.raises(eventq.InvalidArgumentError):
            eventq.Chan.import_fds(bad)
    tx.release()


def test_shared_fds_text_and_close(tmp_path: Path) -> None:
    f = eventq.SharedFds.parse("recv:3,4,5,6")
    assert (f.side, f.fds, str(f)) == (eventq.Side.RECV, (3, 4, 5, 6), "recv:3,4,5,6")
    tx = eventq.Chan.new_shared(4, side=eventq.Side.SEND)
    with tx.export_fds() as fds:
        assert eventq.SharedFds.parse(str(fds)).fds == fds.fds
        assert all(not os.get_inheritable(fd) for fd in fds.fds)
    with pytest.raises(OSError):
        os.fstat(fds.mem)  # closed by the with block
    tx.release()


def test_consumer_leave_writes_only_for_another() -> None:
    tx, rx = pair(eventq.Side.SEND, capacity=8)
    local = eventq.Chan(8)
    for send, recv in ((local, local), (tx, rx)):
        send.send(b"x")
        before = recv.stats().recv_doorbell_rings
        with recv.consumer():
            pass
        assert recv.stats().recv_doorbell_rings == before, "alone: no write"
        with recv.consumer() as stays:
            k = recv.consumer()
            k.leave()
            assert k.left and not stays.left
            assert recv.stats().recv_doorbell_rings == before + 1, "another stays: one write"
            k.leave()  # again: nothing
            recv.recv(timeout=0)
            with recv.consumer():
                pass
            assert recv.stats().recv_doorbell_rings == before + 1, "nothing pending: no write"
        assert stays.left
    # A consumer outlives the release of its Chan.
    k = local.consumer()
    local.release()
    k.leave()
    tx.release()
    rx.release()


@pytest.mark.parametrize("end", ["close", "exit"])
def test_cross_c_producer_into_asyncio(children: Any, end: str) -> None:
    """The C producer process (tests/cross/producer, its path in
    EVENTQ_CROSS_PRODUCER) takes the sending end from fds it inherits; two
    C threads send `per` messages each (sequence numbers and an FNV-1a
    checksum), an asyncio consumer checks every one (once, whole, in
    order), then end of stream: by close, or by the producer's exit."""
    producer = os.environ.get("EVENTQ_CROSS_PRODUCER")
    if not producer:
        pytest.skip("EVENTQ_CROSS_PRODUCER is not set (make test-python builds the C producer and sets it)")
    per = 10_000

    async def main() -> None:
        rx = eventq.Chan.new_shared(64, side=eventq.Side.RECV, max_msg_size=80)
        with rx.export_fds() as fds:
            child = children([producer, "import", str(fds), str(per), end], pass_fds=fds.fds)
        chk = Checker(2, per, encode_checked)
        async for m in rx:
            chk.check(m)
        assert chk.complete()
        child.wait()
        rx.release()

    asyncio.run(asyncio.wait_for(main(), WATCHDOG))
