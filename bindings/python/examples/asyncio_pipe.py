# SPDX-License-Identifier: MIT OR Apache-2.0
"""A pipeline into asyncio: producer threads send, a coroutine receives.

Two plain threads (think: blocking I/O) each send numbered messages into
one channel; the asyncio task receives them with `async for` until the
channel is closed (end of stream) and checks that every message came
exactly once and in each sender's order (D1, D2 of docs/design.md).

    python examples/asyncio_pipe.py [messages per thread]
"""

from __future__ import annotations

import asyncio
import struct
import sys
import threading

import eventq

THREADS = 2


async def main(per_thread: int) -> int:
    ch = eventq.Chan(capacity=64)  # small: the senders block while the loop is behind

    def producer(tid: int, tx: eventq.Chan) -> None:
        try:
            for seq in range(per_thread):
                tx.send(struct.pack("<II", tid, seq))
        finally:
            tx.release()  # this handle only; the channel stays open

    producers = [threading.Thread(target=producer, args=(t, ch.clone())) for t in range(THREADS)]

    def closer(tx: eventq.Chan) -> None:
        for t in producers:
            t.join()
        with tx:  # closes the channel: end of stream once the loop drained it
            pass

    threads = producers + [threading.Thread(target=closer, args=(ch.clone(),))]
    for t in threads:
        t.start()
    next_seq = [0] * THREADS
    async for msg in ch:
        tid, seq = struct.unpack("<II", msg)
        if seq != next_seq[tid]:
            print(f"thread {tid}: got {seq}, expected {next_seq[tid]}", file=sys.stderr)
            return 1
        next_seq[tid] += 1
    for t in threads:
        t.join()
    ch.release()
    if next_seq != [per_thread] * THREADS:
        print(f"received {next_seq}, expected {per_thread} from each thread", file=sys.stderr)
        return 1
    print(f"asyncio_pipe: {THREADS * per_thread} messages from {THREADS} threads, each once and in order")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10000)))
