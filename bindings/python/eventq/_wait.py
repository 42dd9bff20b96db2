# SPDX-License-Identifier: MIT OR Apache-2.0
"""Waiting for an fd: in poll() (interruptible by signals) or in asyncio.

Both wait for readability only; the caller then makes the non-blocking
library call, so a wait that ends early (a signal, a cancellation, a
timeout) has taken nothing.
"""

from __future__ import annotations

import select
import time
import weakref
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # imported when a coroutine first waits: threads never pay for it
    import asyncio

#: Longest a main-thread wait sleeps before it checks for signals that
#: another thread received (a signal to the main thread ends it at once).
SIGNAL_SLICE = 0.1


def poll_fd(fd: int, deadline: Optional[float]) -> bool:
    """Waits in poll() until fd is readable; False once the deadline passed
    (a deadline already passed asks once, without waiting).

    A signal makes poll() fail with EINTR and Python run its handler, so a
    KeyboardInterrupt comes out of here at once, with nothing taken.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        if deadline is None:
            slice_ = SIGNAL_SLICE
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return bool(poller.poll(0))
            slice_ = min(SIGNAL_SLICE, left)
        if poller.poll(max(1, int(slice_ * 1000 + 0.999))):
            return True


class _FdWaiters:
    """The coroutines of one asyncio loop waiting for one fd to be readable.

    asyncio keeps one reader callback per fd, and every handle of a channel
    shares its fds, so all waiters of a loop on an fd share one
    registration: it is added by the first waiter and removed as soon as
    no one waits (a readable fd nobody drains would make the loop spin).
    """

    __slots__ = ("loop", "fd", "futs", "registered", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop = loop
        self.fd = fd
        self.futs: list[asyncio.Future[bool]] = []
        self.registered = False

    def wait(self) -> asyncio.Future[bool]:
        fut = self.loop.create_future()
        self.futs.append(fut)
        if not self.registered:
            self.loop.add_reader(self.fd, self._ready)
            self.registered = True
        return fut

    def _ready(self) -> None:
        futs, self.futs = self.futs, []
        self.loop.remove_reader(self.fd)
        self.registered = False
        for fut in futs:
            if not fut.done():
                fut.set_result(True)

    def discard(self, fut: asyncio.Future[bool]) -> None:
        try:
            self.futs.remove(fut)
        except ValueError:
            return
        if not self.futs and self.registered:
            self.loop.remove_reader(self.fd)
            self.registered = False


_fd_waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _FdWaiters]] = (
    weakref.WeakKeyDictionary()
)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


async def wait_readable(fd: int, deadline: Optional[float]) -> bool:
    """Waits in the running loop until fd is readable; False at the deadline."""
    import asyncio

    loop = asyncio.get_running_loop()
    per_loop = _fd_waiters.get(loop)
    if per_loop is None:
        per_loop = _fd_waiters[loop] = {}
    waiters = per_loop.get(fd)
    if waiters is None:
        waiters = per_loop[fd] = _FdWaiters(loop, fd)
    fut = waiters.wait()
    timer = None if deadline is None else loop.call_at(deadline, _expire, fut)
    try:
        return await fut
    finally:
        if timer is not None:
            timer.cancel()
        waiters.discard(fut)
        if not waiters.futs and not waiters.registered and per_loop.get(fd) is waiters:
            del per_loop[fd]
