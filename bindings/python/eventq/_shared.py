# SPDX-License-Identifier: MIT OR Apache-2.0
"""What a process-shared channel adds: its sides, the fds a child inherits,
and consumer counting (which any channel has)."""

from __future__ import annotations

import enum
import errno as _errno
import os
import re
from typing import Any

from ._errors import InvalidArgumentError, error_for
from ._ffi import lib


class Side(enum.IntEnum):
    """The end of a process-shared channel a process holds: one process
    sends on the channel, the other receives (each with any number of
    threads). `str()` is "send" or "recv"."""

    SEND = lib.EVENTQ_SIDE_SEND  #: this process sends; the other receives
    RECV = lib.EVENTQ_SIDE_RECV  #: this process receives; the other sends

    def __str__(self) -> str:
        return self.name.lower()


_SPEC = re.compile(r"(send|recv):(\d+),(\d+),(\d+),(\d+)")


class SharedFds:
    """The four fds of one end of a process-shared channel, for a child
    process to inherit (`Chan.export_fds()`).

    Give `fds` to `subprocess.Popen(pass_fds=...)`, which keeps their
    numbers in the child, and tell the child `str(shared)` (in its
    environment or arguments): "side:mem,recv_bell,send_bell,link", e.g.
    "recv:5,6,7,8", the form the Go binding's `SharedFiles.PassTo` writes.
    The child takes them with `Chan.import_fds(text)`.

    They are this process's copies: close them (`close()`, or leave the
    `with` block) once the child has started, or the channel never learns
    of the child's death.
    """

    __slots__ = ("side", "mem", "recv_bell", "send_bell", "link", "_open")

    def __init__(self, side: Side, mem: int, recv_bell: int, send_bell: int, link: int) -> None:
        self.side = Side(side)  #: the side the process that imports them gets
        self.mem = mem  #: the channel's memory, a sealed memfd
        self.recv_bell = recv_bell  #: the receive doorbell, an eventfd
        self.send_bell = send_bell  #: the send doorbell, an eventfd
        self.link = link  #: the link to the exporting process, one end of a socket pair
        self._open = True

    @property
    def fds(self) -> tuple[int, int, int, int]:
        """(mem, recv_bell, send_bell, link): what `pass_fds` takes."""
        return (self.mem, self.recv_bell, self.send_bell, self.link)

    def __str__(self) -> str:
        return f"{self.side}:{self.mem},{self.recv_bell},{self.send_bell},{self.link}"

    def __repr__(self) -> str:
        state = "" if self._open else " closed"
        return f"<eventq.SharedFds {self}{state}>"

    @classmethod
    def parse(cls, text: str) -> "SharedFds":
        """The fds `str()` wrote ("side:mem,recv_bell,send_bell,link");
        InvalidArgumentError if `text` is not of that form."""
        m = _SPEC.fullmatch(text.strip())
        if m is None:
            raise InvalidArgumentError(
                _errno.EINVAL, f"{text!r}: want side:mem,recv_bell,send_bell,link, e.g. send:3,4,5,6"
            )
        side = Side.SEND if m[1] == "send" else Side.RECV
        return cls(side, *(int(m[i]) for i in range(2, 6)))

    def _take(self) -> tuple[int, int, int, int]:
        """The fds, which the caller owns from now on (close() leaves them)."""
        if not self._open:
            raise ValueError("these shared fds were closed or imported already")
        self._open = False
        return self.fds

    def close(self) -> None:
        """Closes this process's copies. Closing again does nothing."""
        if self._open:
            self._open = False
            for fd in self.fds:
                os.close(fd)

    def __enter__(self) -> "SharedFds":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    """A consumer counted in on a channel (`Chan.consumer()`) until
    `leave()`, or the end of its `with` block.

    Leaving while messages remain and another consumer is counted writes
    the receive fd once more, so a wake-up the leaver took (and will not
    act on) passes on to another waiter (D4). It matters for consumers that
    wait on `fileno()` with EPOLLEXCLUSIVE (one wakes per write) and for
    mixing them with libeventq loops (which count themselves); waiters of
    `add_reader`, `poll()` or a process-shared channel (whose fd is an
    epoll fd, which refuses EPOLLEXCLUSIVE) all wake on every write, so
    counting them is harmless but not needed.

    It holds the channel's handle until it leaves, so it may leave after
    the Chan was released.
    """

    __slots__ = ("_p",)

    def __init__(self, p: Any) -> None:
        rc = lib.eventq_chan_consumer_enter(p)
        if rc < 0:
            raise error_for(rc, "consumer_enter")
        self._p = p

    def leave(self) -> None:
        """Counts the consumer out. Leaving again does nothing."""
        p, self._p = self._p, None
        if p is not None:
            rc = lib.eventq_chan_consumer_leave(p)
            if rc < 0:
                raise error_for(rc, "consumer_leave")

    @property
    def left(self) -> bool:
        """True once leave() was called."""
        return self._p is None

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()


__all__ = ["Consumer", "SharedFds", "Side"]
