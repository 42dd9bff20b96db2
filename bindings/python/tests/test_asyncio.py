# SPDX-License-Identifier: MIT OR Apache-2.0
"""asyncio: waiting on the fds with add_reader, timeouts, cancellation that
loses nothing, many waiters on one fd, several loops, end of stream.

`await asyncio.sleep(0)` below is a yield to the loop (the task then runs
up to its wait), not a timed sleep.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable

import pytest

import eventq
from eventq import _chan


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro_fn())  # type: ignore[arg-type]


async def let_tasks_run() -> None:
    """One loop iteration: started tasks run up to their first wait."""
    await asyncio.sleep(0)


def no_reader_left(ch: eventq.Chan) -> bool:
    loop = asyncio.get_running_loop()
    return not loop.remove_reader(ch.fileno()) and not loop.remove_reader(ch.send_fileno())


def test_recv_async_waits_for_a_message() -> None:
    async def main() -> None:
        with eventq.Chan() as ch:
            task = asyncio.create_task(ch.recv_async())
            await let_tasks_run()
            assert not task.done()
            ch.send(b"hello")
            assert await task == b"hello"
            assert no_reader_left(ch)

    run(main)


def test_timeouts_and_bad_timeouts() -> None:
    async def main() -> None:
        with eventq.Chan(1) as ch:
            with pytest.raises(eventq.WouldBlockError):
                await ch.recv_async(timeout=0)
            with pytest.raises(eventq.TimeoutError):
                await ch.recv_async(timeout=0.001)
            with pytest.raises(TimeoutError):
                await ch.recv_batch_async(timeout=0.001)
            ch.send(b"full")
            with pytest.raises(BlockingIOError):
                await ch.send_async(b"x", timeout=0)
            with pytest.raises(eventq.TimeoutError):
                await ch.send_async(b"x", timeout=0.001)
            with pytest.raises(eventq.TimeoutError):
                await ch.send_batch_async([b"x"], timeout=0.001)
            for call in (
                lambda: ch.recv_async(timeout=-1),
                lambda: ch.recv_batch_async(timeout=-1),
                lambda: ch.send_async(b"x", timeout=-1),
                lambda: ch.send_batch_async([b"x"], timeout=-1),
            ):
                with pytest.raises(eventq.InvalidArgumentError):
                    await call()
            with pytest.raises(eventq.InvalidArgumentError):
                await ch.recv_batch_async(0)
            with pytest.raises(TypeError):
                await ch.send_async("text")  # type: ignore[arg-type]
            assert ch.stats().pending == 1 and ch.recv() == b"full"
            assert no_reader_left(ch)

    run(main)


def test_cancelled_receive_takes_nothing() -> None:
    async def main() -> None:
        with eventq.Chan() as ch:
            task = asyncio.create_task(ch.recv_async())
            await let_tasks_run()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert no_reader_left(ch)
            ch.send(b"after")
            assert await ch.recv_async() == b"after"
            assert ch.stats().received == 1

    run(main)


@pytest.mark.parametrize("order", ["wake-then-cancel", "cancel-then-wake"])
def test_cancel_in_the_same_iteration_as_the_wake_up_loses_nothing(order: str) -> None:
    """The message arrives and the receive is cancelled in the same loop
    iteration. asyncio runs I/O callbacks before due timers, so a timer due
    now runs right after the reader callback woke the waiter: the task then
    resumes with CancelledError, not its wake-up. Either way nothing was
    taken, and the message is there for the next receive."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with eventq.Chan() as ch:
            task = asyncio.create_task(ch.recv_async())
            await let_tasks_run()
            if order == "wake-then-cancel":
                ch.send(b"m")
                loop.call_at(loop.time(), task.cancel)
            else:
                task.cancel()
                ch.send(b"m")
            done, _ = await asyncio.wait([task])
            assert task.cancelled()
            assert ch.stats().received == 0 and ch.stats().pending == 1
            assert await ch.recv_async() == b"m"
            assert no_reader_left(ch)

    run(main)


def test_wait_for_timeout_racing_a_message_loses_nothing() -> None:
    """A receive under asyncio.wait_for whose timeout expires in the same
    iteration as the message: it returns the message, or it times out and
    the message is still queued."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with eventq.Chan() as ch:
            got = []
            for i in range(50):
                task = asyncio.create_task(asyncio.wait_for(ch.recv_async(), 1000))
                await let_tasks_run()
                ch.send(b"%d" % i)
                loop.call_at(loop.time(), task.cancel)
                try:
                    got.append(await task)
                except asyncio.CancelledError:
                    pass
            got += ch.recv_batch(100, timeout=0) if ch.stats().pending else []
            assert got == [b"%d" % i for i in range(50)]

    run(main)


def test_receive_timeout_racing_a_message_loses_nothing() -> None:
    async def main() -> None:
        with eventq.Chan() as ch:
            got = []
            for i in range(50):
                task = asyncio.create_task(ch.recv_async(timeout=0.0001))
                ch.send(b"%d" % i)
                try:
                    got.append(await task)
                except eventq.TimeoutError:
                    pass
            while ch.stats().pending:
                got.append(ch.recv())
            assert got == [b"%d" % i for i in range(50)]

    run(main)


def test_many_waiters_on_one_fd() -> None:
    """Seven receives wait at once, five on one handle and two on a clone
    (the same fd): one registration serves them all, each gets one message."""

    async def main() -> None:
        ch = eventq.Chan()
        clone = ch.clone()
        tasks = [asyncio.create_task(ch.recv_async()) for _ in range(5)]
        tasks += [asyncio.create_task(clone.recv_async()) for _ in range(2)]
        await let_tasks_run()
        assert not any(t.done() for t in tasks)
        for i in range(7):
            ch.send(b"%d" % i)
        got = await asyncio.gather(*tasks)
        assert sorted(got) == [b"%d" % i for i in range(7)]
        assert no_reader_left(ch)
        ch.release()
        clone.release()

    run(main)


def test_one_channel_two_loops() -> None:
    """A receive waiting in a loop in another thread and one in this loop:
    each loop registers the fd on its own."""
    ch = eventq.Chan()
    other: list[bytes] = []
    waiting = threading.Event()

    def other_loop() -> None:
        async def recv() -> None:
            task = asyncio.create_task(ch.recv_async())
            await let_tasks_run()
            waiting.set()
            other.append(await task)

        asyncio.run(recv())

    t = threading.Thread(target=other_loop)
    t.start()
    waiting.wait()

    async def main() -> bytes:
        task = asyncio.create_task(ch.recv_async())
        await let_tasks_run()
        ch.send(b"a")
        ch.send(b"b")
        return await task

    mine = asyncio.run(main())
    t.join()
    assert sorted([mine] + other) == [b"a", b"b"]
    ch.release()


def test_send_async_waits_for_room() -> None:
    async def main() -> None:
        with eventq.Chan(2, low_water=1) as ch:
            await ch.send_async(b"1")
            await ch.send_async(b"2")
            task = asyncio.create_task(ch.send_async(b"3"))
            await let_tasks_run()
            assert not task.done() and ch.stats().pending == 2
            assert ch.recv() == b"1"  # depth 1: low water, the send fd rises
            await task
            assert [await ch.recv_async(), await ch.recv_async()] == [b"2", b"3"]
            assert no_reader_left(ch)

    run(main)


def test_send_batch_async_queues_a_prefix() -> None:
    async def main() -> None:
        with eventq.Chan(2) as ch:
            assert await ch.send_batch_async([]) == 0
            assert await ch.send_batch_async([b"a", b"b", b"c"]) == 2
            task = asyncio.create_task(ch.send_batch_async([b"c", b"d"]))
            await let_tasks_run()
            assert not task.done()
            assert await ch.recv_batch_async(1) == [b"a"]
            assert ch.recv() == b"b"  # empty now: the send fd is up
            assert await task == 2
            assert await ch.recv_batch_async(5) == [b"c", b"d"]

    run(main)


def test_async_iteration_ends_at_end_of_stream() -> None:
    ch = eventq.Chan(16)

    def produce() -> None:
        with ch.clone() as tx:  # closes the channel when done
            for i in range(1000):
                tx.send(b"%d" % i)

    async def main() -> list[bytes]:
        t = threading.Thread(target=produce)
        t.start()
        got = [m async for m in ch]
        t.join()
        return got

    assert run(main) == [b"%d" % i for i in range(1000)]
    ch.release()


def test_closed_and_released_in_asyncio() -> None:
    async def main() -> None:
        ch = eventq.Chan()
        ch.send(b"last")
        ch.close()
        with pytest.raises(eventq.ClosedError):
            await ch.send_async(b"x")
        with pytest.raises(eventq.ClosedError):
            await ch.send_batch_async([b"x"])
        assert await ch.recv_batch_async() == [b"last"]
        with pytest.raises(eventq.ClosedError):
            await ch.recv_async()
        with pytest.raises(eventq.ClosedError):
            await ch.recv_batch_async()
        ch.release()
        with pytest.raises(ValueError):
            await ch.recv_async()
        with pytest.raises(ValueError):
            await ch.send_async(b"x")

    run(main)


def test_waiting_receive_wakes_on_close_from_a_thread() -> None:
    async def main() -> None:
        with eventq.Chan() as ch:
            task = asyncio.create_task(ch.recv_async())
            await let_tasks_run()
            t = threading.Thread(target=ch.close)
            t.start()
            with pytest.raises(eventq.ClosedError):
                await task
            t.join()

    run(main)


def test_interrupted_after_the_take_in_recv_async(monkeypatch: pytest.MonkeyPatch) -> None:
    """As test_chan's: an exception right after the take keeps the message."""
    real = _chan._c_recv
    state = {"armed": True}

    def interrupting(*args: Any) -> int:
        rc = real(*args)
        if state["armed"] and rc == 0:
            state["armed"] = False
            raise KeyboardInterrupt
        return rc

    monkeypatch.setattr(_chan, "_c_recv", interrupting)
    with eventq.Chan() as ch:
        ch.send(b"kept")
        coro = ch.recv_async()
        with pytest.raises(KeyboardInterrupt):
            coro.send(None)
        assert ch.stats().received == 1
        assert run(ch.recv_async) == b"kept"
