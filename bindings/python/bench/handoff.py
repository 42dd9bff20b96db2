# SPDX-License-Identifier: MIT OR Apache-2.0
"""Thread-to-asyncio hand-off of small messages, in one run:

- eventq: a Python producer thread sends into a Chan; an asyncio consumer
  receives on the channel's fd (recv_async / recv_batch_async);
- call_soon_threadsafe: the producer hands each message (or batch) to
  loop.call_soon_threadsafe(queue.put_nowait, ...) of an asyncio.Queue;
- queue.Queue: the producer puts into a queue.Queue(maxsize=capacity), the
  consumer gets through loop.run_in_executor (one get per message; for
  batches, one list per get).

Single messages: one message per call on both sides. The queue.Queue
single-message row moves --msgs/10 messages per run (an executor round trip
per message is slow; its rate is per message all the same). Batches: the producer
hands over BATCH messages per call (send_batch, one call_soon_threadsafe or
one put of a list) and the consumer takes up to BATCH per call. Every
message is checked (its sequence number, in order) and a run fails if one
is missing, repeated or out of place. The messages are made before the
clock starts. Each configuration runs --reps times, interleaved; the table
shows the median and the spread.

    python bench/handoff.py [--msgs N] [--reps R] [--batch B] [--size BYTES]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import queue
import statistics
import sys
import threading
import time
from typing import Awaitable, Callable

import eventq

Runner = Callable[[list[bytes], int], Awaitable[None]]


class Check:
    """The consumer's check: sequence numbers 0, 1, 2, ... in order."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next = 0

    def one(self, m: bytes) -> None:
        if int.from_bytes(m[:8], "little") != self.next:
            raise AssertionError(f"expected message {self.next}, got {int.from_bytes(m[:8], 'little')}")
        self.next += 1


def chunks(msgs: list[bytes], n: int) -> list[list[bytes]]:
    return [msgs[i : i + n] for i in range(0, len(msgs), n)]


def start(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target)
    t.start()
    return t


async def eventq_single(msgs: list[bytes], capacity: int) -> None:
    ch = eventq.Chan(capacity)

    def produce() -> None:
        send = ch.send
        for m in msgs:
            send(m)

    chk = Check()
    t = start(produce)
    recv = ch.recv_async
    for _ in range(len(msgs)):
        chk.one(await recv())
    t.join()
    ch.release()


async def eventq_batch(msgs: list[bytes], capacity: int, batch: int) -> None:
    ch = eventq.Chan(capacity)
    parts = chunks(msgs, batch)

    def produce() -> None:
        send_batch = ch.send_batch
        for part in parts:
            while part:
                part = part[send_batch(part) :]

    chk = Check()
    t = start(produce)
    recv_batch = ch.recv_batch_async
    n = len(msgs)
    while chk.next < n:
        for m in await recv_batch(batch):
            chk.one(m)
    t.join()
    ch.release()


async def cst_single(msgs: list[bytes], capacity: int) -> None:
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[bytes] = asyncio.Queue()  # unbounded: a thread cannot wait on it

    def produce() -> None:
        call, put = loop.call_soon_threadsafe, q.put_nowait
        for m in msgs:
            call(put, m)

    chk = Check()
    t = start(produce)
    get = q.get
    for _ in range(len(msgs)):
        chk.one(await get())
    t.join()


async def cst_batch(msgs: list[bytes], capacity: int, batch: int) -> None:
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[list[bytes]] = asyncio.Queue()
    parts = chunks(msgs, batch)

    def produce() -> None:
        call, put = loop.call_soon_threadsafe, q.put_nowait
        for part in parts:
            call(put, part)

    chk = Check()
    t = start(produce)
    n = len(msgs)
    while chk.next < n:
        for m in await q.get():
            chk.one(m)
    t.join()


async def queue_single(msgs: list[bytes], capacity: int) -> None:
    loop = asyncio.get_running_loop()
    q: queue.Queue[bytes] = queue.Queue(capacity)

    def produce() -> None:
        put = q.put
        for m in msgs:
            put(m)

    chk = Check()
    t = start(produce)
    for _ in range(len(msgs)):
        chk.one(await loop.run_in_executor(None, q.get))
    t.join()


async def queue_batch(msgs: list[bytes], capacity: int, batch: int) -> None:
    loop = asyncio.get_running_loop()
    q: queue.Queue[list[bytes]] = queue.Queue(max(1, capacity // batch))
    parts = chunks(msgs, batch)

    def produce() -> None:
        put = q.put
        for part in parts:
            put(part)

    chk = Check()
    t = start(produce)
    n = len(msgs)
    while chk.next < n:
        for m in await loop.run_in_executor(None, q.get):
            chk.one(m)
    t.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--msgs", type=int, default=200_000, help="messages per run (default 200000)")
    ap.add_argument("--reps", type=int, default=5, help="runs of each configuration (default 5)")
    ap.add_argument("--batch", type=int, default=64, help="messages per batch (default 64)")
    ap.add_argument("--size", type=int, default=16, help="message size in bytes, at least 8 (default 16)")
    ap.add_argument("--capacity", type=int, default=1024, help="channel / queue.Queue capacity (default 1024)")
    ap.add_argument("--smoke", action="store_true", help="tiny counts: checks delivery only")
    args = ap.parse_args()
    if args.smoke:
        args.msgs, args.reps = 2000, 1
    pad = bytes(max(0, args.size - 8))
    msgs = [i.to_bytes(8, "little") + pad for i in range(args.msgs)]
    b = args.batch
    configs: list[tuple[str, str, Runner]] = [
        ("single", "eventq: send -> await recv_async()", eventq_single),
        ("single", "call_soon_threadsafe + asyncio.Queue", cst_single),
        ("single", "queue.Queue + run_in_executor(get)", queue_single),
        ("batch", f"eventq: send_batch({b}) -> recv_batch_async({b})", lambda m, c: eventq_batch(m, c, b)),
        ("batch", f"call_soon_threadsafe(list of {b}) + asyncio.Queue", lambda m, c: cst_batch(m, c, b)),
        ("batch", f"queue.Queue(list of {b}) + run_in_executor(get)", lambda m, c: queue_batch(m, c, b)),
    ]
    print("libeventq Python binding: thread -> asyncio hand-off")
    print(
        f"python {platform.python_version()} ({sys.executable}), libeventq {eventq.library_version} "
        f"({eventq.library_path}), {os.cpu_count()} CPUs, {platform.platform()}"
    )
    print(
        f"{args.msgs} messages of {args.size} bytes per run, capacity {args.capacity}, batch {b}, "
        f"median of {args.reps} run(s), interleaved; loadavg at the start {os.getloadavg()[0]:.2f}"
    )
    rates: dict[str, list[float]] = {name: [] for _, name, _ in configs}
    slow = {configs[2][1]: max(1, args.msgs // 10)}  # messages per run, where not --msgs
    started = time.monotonic()
    asyncio.run(configs[0][2](msgs[: min(len(msgs), 10_000)], args.capacity))  # warm-up
    for _ in range(args.reps):
        for _, name, run in configs:
            n = slow.get(name, args.msgs)
            t0 = time.perf_counter()
            asyncio.run(run(msgs[:n], args.capacity))
            rates[name].append(n / (time.perf_counter() - t0))
    med = {name: statistics.median(r) for name, r in rates.items()}
    print(
        f"({time.monotonic() - started:.0f} s; loadavg at the end {os.getloadavg()[0]:.2f}, "
        "this run's own load included: figures from a busy machine spread widely)\n"
    )
    ref = configs[1][1]
    print(f"{'configuration':<56} {'K msg/s':>9} {'min-max K/s':>15} {'vs cst single':>14}")
    for kind, name, _ in configs:
        r = rates[name]
        print(
            f"{name:<56} {med[name] / 1e3:9.1f} {min(r) / 1e3:7.1f}-{max(r) / 1e3:<7.1f} {med[name] / med[ref]:13.2f}x"
        )
    if args.smoke:
        print("\nsmoke run: the figures above mean nothing at this size")
        print("delivery: every run received every message once, in order")
        return 0
    single = med[configs[0][1]] / med[ref]
    batch_vs_single = med[configs[3][1]] / med[ref]
    batch_vs_batch = med[configs[3][1]] / med[configs[4][1]]
    print()
    print("targets (ratios of the medians; reported, not asserted):")
    print(f"  eventq single / call_soon_threadsafe single   {single:6.2f}x  target >= 1.0x  {'met' if single >= 1 else 'MISSED'}")
    print(
        f"  eventq batch / call_soon_threadsafe single    {batch_vs_single:6.2f}x  target >= 3x    "
        f"{'met' if batch_vs_single >= 3 else 'MISSED'}"
    )
    print(f"  eventq batch / call_soon_threadsafe batch     {batch_vs_batch:6.2f}x  (for reference)")
    print("delivery: every run received every message once, in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
