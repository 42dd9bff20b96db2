# SPDX-License-Identifier: MIT OR Apache-2.0
"""Real threads: 4 C producer threads (tests/helper.c) and Python producer
threads, into blocking receives (main thread: poll; other threads: the
library's blocking call) and into asyncio. Every message is checked: whole,
once, in its producer's order; the stream ends at close.

No sleeps: waits end on messages, close, or a flag; the pytest-timeout
watchdog is the only timer.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Callable

import pytest

import eventq
from conftest import Checker, encode

PRODUCERS = 4
PER_PRODUCER = 25_000


def start_c_producers(helper: Any, ch: eventq.Chan, per: int = PER_PRODUCER, batch: int = 0) -> Callable[[], None]:
    """Starts PRODUCERS C threads sending into ch, the last closing it; returns join()."""
    ffi, lib = helper
    run = lib.eqtest_producers_start(ch.clone_handle(), PRODUCERS, per, batch, 1)
    assert run != ffi.NULL

    def join() -> None:
        assert lib.eqtest_producers_join(run) == 0

    return join


def start_py_producers(ch: eventq.Chan, per: int, batch: int = 0) -> Callable[[], None]:
    """Starts PRODUCERS Python threads, each with its own handle; the last closes."""
    left = [PRODUCERS]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def produce(pid: int, tx: eventq.Chan) -> None:
        try:
            with tx:  # closes the channel on exit: only the last one may
                if batch:
                    for start in range(0, per, batch):
                        msgs = [encode(pid, s) for s in range(start, min(per, start + batch))]
                        while msgs:
                            msgs = msgs[tx.send_batch(msgs) :]
                else:
                    for seq in range(per):
                        tx.send(encode(pid, seq))
                with lock:
                    left[0] -= 1
                    if left[0] != 0:
                        tx.release()  # not the last: release without closing
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(i, ch.clone())) for i in range(PRODUCERS)]
    for t in threads:
        t.start()

    def join() -> None:
        for t in threads:
            t.join()
        assert not errors, errors

    return join


@pytest.mark.parametrize("how", ["recv", "recv_batch", "recv_into", "iterate"])
def test_c_producers_into_the_main_thread(helper: Any, how: str) -> None:
    ch = eventq.Chan(64)  # small: the producers block on it
    join = start_c_producers(helper, ch, batch=16 if how == "recv_batch" else 0)
    chk = Checker(PRODUCERS, PER_PRODUCER)
    if how == "iterate":
        for m in ch:
            chk.check(m)
    else:
        buf = bytearray(64)
        while True:
            try:
                if how == "recv":
                    chk.check(ch.recv())
                elif how == "recv_into":
                    n = ch.recv_into(buf)
                    chk.check(bytes(buf[:n]))
                else:
                    for m in ch.recv_batch(32):
                        chk.check(m)
            except eventq.ClosedError:
                break
    join()
    assert chk.complete()
    st = ch.stats()
    assert st.closed and st.sent == st.received == PRODUCERS * PER_PRODUCER and st.pending == 0
    assert st.peak_depth <= 64
    ch.release()


def test_c_producers_into_a_worker_thread(helper: Any) -> None:
    """Outside the main thread the receive blocks inside the library."""
    ch = eventq.Chan(64)
    chk = Checker(PRODUCERS, PER_PRODUCER)
    failed: list[BaseException] = []

    def consume() -> None:
        try:
            for m in ch:
                chk.check(m)
        except BaseException as e:
            failed.append(e)

    t = threading.Thread(target=consume)
    t.start()
    join = start_c_producers(helper, ch)
    join()
    t.join()
    assert not failed, failed
    assert chk.complete()
    ch.release()


@pytest.mark.parametrize("batch", [0, 32])
def test_c_producers_into_asyncio(helper: Any, batch: int) -> None:
    ch = eventq.Chan(64)
    chk = Checker(PRODUCERS, PER_PRODUCER)

    async def consume() -> None:
        join = start_c_producers(helper, ch, batch=batch)
        if batch:
            while True:
                try:
                    msgs = await ch.recv_batch_async(batch)
                except eventq.ClosedError:
                    break
                for m in msgs:
                    chk.check(m)
        else:
            async for m in ch:  # ends at end of stream
                chk.check(m)
        await asyncio.get_running_loop().run_in_executor(None, join)

    asyncio.run(consume())
    assert chk.complete()
    ch.release()


@pytest.mark.parametrize("batch", [0, 50])
def test_python_threads_into_asyncio(batch: int) -> None:
    per = 5_000
    ch = eventq.Chan(128)
    chk = Checker(PRODUCERS, per)

    async def consume() -> None:
        join = start_py_producers(ch, per, batch)
        async for m in ch:
            chk.check(m)
        join()

    asyncio.run(consume())
    assert chk.complete()
    ch.release()


def test_several_consumers_each_message_once(helper: Any) -> None:
    """Two consumer threads and the main thread share one channel: every
    message is received by exactly one of them, and each sees each
    producer's messages in order."""
    ch = eventq.Chan(32)
    seen: list[list[bytes]] = [[], [], []]

    def consume(out: list[bytes]) -> None:
        for m in ch:
            out.append(m)

    threads = [threading.Thread(target=consume, args=(seen[i],)) for i in range(2)]
    for t in threads:
        t.start()
    join = start_c_producers(helper, ch, per=10_000)
    consume(seen[2])
    join()
    for t in threads:
        t.join()
    every = [m for part in seen for m in part]
    assert len(every) == len(set(every)) == PRODUCERS * 10_000
    for part in seen:
        last = [-1] * PRODUCERS
        for m in part:
            pid, seq = int.from_bytes(m[:4], "little"), int.from_bytes(m[4:12], "little")
            assert seq > last[pid] and m == encode(pid, seq)
            last[pid] = seq
    ch.release()


def test_blocking_calls_release_the_gil(helper: Any) -> None:
    """A thread blocked in a library call does not hold the GIL: this thread
    runs Python code (reads a flag the C code set from inside the call) and
    sends the message that ends the call. With the GIL held it would hang
    (the watchdog fails it)."""
    ffi, lib = helper
    ch = eventq.Chan()
    handle = ch.clone_handle()
    flag = ffi.new("int *")
    buf = ffi.new("char[]", 64)
    lenp = ffi.new("size_t *")
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(lib.eqtest_recv_announce(handle, flag, buf, 64, lenp)))
    t.start()
    while flag[0] == 0:  # set by the C code inside the call
        os.sched_yield()
    ch.send(b"wake up")
    t.join()
    assert result == [0] and ffi.unpack(buf, lenp[0]) == b"wake up"
    eventq.Chan.from_handle(handle).release()
    ch.release()


def test_blocked_worker_wakes_on_close() -> None:
    ch = eventq.Chan()
    out: list[BaseException] = []
    entered = threading.Event()

    def wait() -> None:
        entered.set()
        try:
            ch.recv()
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=wait)
    t.start()
    entered.wait()
    other = ch.clone()
    other.close()  # before or during the worker's wait: either way it ends
    t.join()
    assert len(out) == 1 and isinstance(out[0], eventq.ClosedError)
    other.release()
    ch.release()


def test_release_during_a_blocked_call_waits_for_it() -> None:
    """release() while another thread is blocked in a call on the same
    handle: the call keeps the handle alive and still completes."""
    ch = eventq.Chan()
    sender = ch.clone()
    got: list[bytes] = []
    entered = threading.Event()

    def wait() -> None:
        entered.set()
        got.append(ch.recv())

    t = threading.Thread(target=wait)
    t.start()
    entered.wait()
    ch.release()
    sender.send(b"still delivered")
    t.join()
    assert got == [b"still delivered"]
    sender.release()
    assert sender.final_stats is not None and sender.final_stats.received == 1


def test_blocked_sender_resumes_when_room_is_made() -> None:
    ch = eventq.Chan(2, low_water=1)
    ch.send(b"1")
    ch.send(b"2")
    done = threading.Event()

    def send() -> None:
        ch.send(b"3")  # blocks: full
        done.set()

    t = threading.Thread(target=send)
    t.start()
    assert ch.recv() == b"1"  # depth 1 = low water: the sender resumes
    t.join()
    assert done.is_set()
    assert [ch.recv(), ch.recv()] == [b"2", b"3"]
    ch.release()
