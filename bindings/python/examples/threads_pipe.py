# SPDX-License-Identifier: MIT OR Apache-2.0
"""Threads only: producers send, consumers receive, with blocking calls.

Each blocking call releases the GIL; every message is received exactly
once by one of the consumers (D1), and a consumer's receives end with
ClosedError once the channel is closed and drained (D6), which the
`for msg in chan` loop turns into the end of the iteration.

    python examples/threads_pipe.py [messages per producer]
"""

from __future__ import annotations

import struct
import sys
import threading

import eventq

PRODUCERS = 2
CONSUMERS = 2


def main(per_producer: int) -> int:
    ch = eventq.Chan(capacity=64)
    received: list[list[tuple[int, int]]] = [[] for _ in range(CONSUMERS)]

    def producer(pid: int, tx: eventq.Chan) -> None:
        try:
            for seq in range(per_producer):
                tx.send(struct.pack("<II", pid, seq))
        finally:
            tx.release()  # this handle only; the channel stays open

    def consumer(cid: int, rx: eventq.Chan) -> None:
        try:
            for msg in rx:  # until closed and drained
                received[cid].append(struct.unpack("<II", msg))
        finally:
            rx.release()

    producers = [threading.Thread(target=producer, args=(p, ch.clone())) for p in range(PRODUCERS)]
    consumers = [threading.Thread(target=consumer, args=(c, ch.clone())) for c in range(CONSUMERS)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join()
    ch.close()  # end of stream once the queue is drained
    for t in consumers:
        t.join()
    ch.release()
    got = sorted(m for part in received for m in part)
    want = sorted((p, s) for p in range(PRODUCERS) for s in range(per_producer))
    if got != want:
        print(f"received {len(got)} messages, expected each of {len(want)} once", file=sys.stderr)
        return 1
    for part in received:  # each consumer sees each producer's messages in order
        for p in range(PRODUCERS):
            seqs = [s for q, s in part if q == p]
            if seqs != sorted(seqs):
                print(f"producer {p}'s messages out of order at a consumer", file=sys.stderr)
                return 1
    print(f"threads_pipe: {len(got)} messages, {PRODUCERS} producers, {CONSUMERS} consumers, each once")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10000))
