# SPDX-License-Identifier: MIT OR Apache-2.0
"""The child process of test_shared.py (run as a script, not collected):

    shared_child.py send socket FD|env COUNT close|hang
        two threads send COUNT messages each (conftest.encode; producer 0
        one per send(), producer 1 in send_batch() calls of 16), then close
        the channel, or say "sent" and wait to be killed
    shared_child.py recv env
        receives one message, says "got" and waits to be killed

taking the channel's end over the Unix socket FD (socket) or from the
inherited fds named in EVENTQ_TEST_CHAN (env).
"""

from __future__ import annotations

import os
import socket
import sys
import threading

import eventq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import encode  # noqa: E402


def take(args: list[str]) -> eventq.Chan:
    if args[0] == "env":
        return eventq.Chan.import_fds(os.environ["EVENTQ_TEST_CHAN"])
    with socket.socket(fileno=int(args[1])) as sock:
        return eventq.Chan.recv_from(sock)


def send_both(ch: eventq.Chan, count: int) -> None:
    def batches() -> None:
        for seq in range(0, count, 16):
            msgs = [encode(1, s) for s in range(seq, min(seq + 16, count))]
            while msgs:
                msgs = msgs[ch.send_batch(msgs):]

    t = threading.Thread(target=batches)
    t.start()
    for seq in range(count):
        ch.send(encode(0, seq))
    t.join()


def main(argv: list[str]) -> None:
    role, how = argv[0], argv[1:]
    ch = take(how)
    if role == "send":
        count, end = int(how[-2]), how[-1]
        send_both(ch, count)
        if end == "close":
            ch.close()
            return
        print("sent", flush=True)
    else:
        ch.recv()
        print("got", flush=True)
    sys.stdin.read()  # until killed


if __name__ == "__main__":
    main(sys.argv[1:])
