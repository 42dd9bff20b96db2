# SPDX-License-Identifier: MIT OR Apache-2.0
"""Chan: a libeventq channel handle, with blocking, non-blocking and asyncio calls.

Where a call waits:

- A blocking call in the main thread waits in poll() on the channel's fd,
  then takes the message with a non-blocking call. poll() returns EINTR on
  a signal, so Ctrl-C raises KeyboardInterrupt at once, with nothing taken;
  the wait is cut in slices of SIGNAL_SLICE seconds so a signal that the
  kernel handed to another thread is also seen.
- In other threads (where Python runs no signal handler) it waits inside
  the library's blocking call, with the GIL released (cffi releases it
  around every call), which costs no fd traffic.
- asyncio calls wait for the fd with loop.add_reader, then take the
  message with a non-blocking call in the coroutine itself: a cancelled
  wait has taken nothing.

Nothing taken is ever dropped: a message that was taken when an exception
(a signal handler's KeyboardInterrupt, say) interrupted the code between
the C call and the return is kept in the handle's stash, and the next
receive on this Chan returns it first.
"""

from __future__ import annotations

import array as _array
import collections
import contextlib
import errno as _errno
import operator
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from itertools import accumulate as _accumulate
from typing import TYPE_CHECKING, Any, Optional, Union

from ._errors import (
    ClosedError,
    Error,
    InvalidArgumentError,
    MessageTooLargeError,
    TimeoutError,
    WouldBlockError,
    error_for,
    strerror,
)
from ._ffi import ffi, lib
from ._shared import Consumer, SharedFds, Side
from ._wait import SIGNAL_SLICE, poll_fd, wait_readable

if TYPE_CHECKING:
    from ._stats import Stats

Buffer = Union[bytes, bytearray, memoryview]

_FOREVER = lib.EVENTQ_FOREVER
_EAGAIN = -_errno.EAGAIN
_ETIMEDOUT = -_errno.ETIMEDOUT
_EMSGSIZE = -_errno.EMSGSIZE
_SIZE_MAX = int(ffi.cast("size_t", -1))
_SIZE_T = ffi.sizeof("size_t")
# The sizes of the structs as declared in _ffi, passed where the library
# asks (it reads and writes only that much: fields of a newer header are
# left to their defaults).
_OPTS_SIZE = ffi.sizeof("eventq_chan_opts")
_STATS_SIZE = ffi.sizeof("eventq_chan_stats")
_SCRATCH_MIN = 64 * 1024
# eventq_buf is {pointer, size_t}: the fast batch path fills it as words of
# an array.array of this typecode.
_WORD = next((c for c in "QLI" if _array.array(c).itemsize == _SIZE_T), None)
_BUF_AS_WORDS = _WORD is not None and ffi.sizeof("eventq_buf") == 2 * _SIZE_T and ffi.sizeof("void *") == _SIZE_T
_MAIN = threading.main_thread()

_c_send = lib.eventq_chan_send
_c_send_batch = lib.eventq_chan_send_batch
_c_recv = lib.eventq_chan_recv
_c_recv_batch = lib.eventq_chan_recv_batch
_unpack = ffi.unpack

# "nothing": the call found no message (or no room) within its timeout.
_NOTHING: Any = object()
# The fd argument of _wait/_await meaning the send fd, made when first polled.
_SEND_FD = -1


# The fields of eventq_chan_stats, in Stats' order (_stats.py). Stats is a
# dataclass made on first use: dataclasses imports inspect, which is most
# of what an import of eventq would cost otherwise.
_STATS_FIELDS = (
    "sent",
    "received",
    "pending",
    "pending_bytes",
    "dropped",
    "peak_depth",
    "recv_doorbell_rings",
    "send_doorbell_rings",
    "closed",
)


def _stats_values(st: Any) -> tuple[Any, ...]:
    """The counters as plain values (safe in a finalizer: no import)."""
    return tuple(bool(st.closed) if n == "closed" else getattr(st, n) for n in _STATS_FIELDS)


def _make_stats(values: tuple[Any, ...]) -> Stats:
    from ._stats import Stats

    return Stats(*values)


class _Scratch(threading.local):
    """Per-thread receive buffers, grown to the largest message seen."""

    def __init__(self) -> None:
        self.cap = _SCRATCH_MIN
        self.buf = ffi.new("char[]", self.cap)
        self.lenp = ffi.new("size_t *")
        self.nlens = 0
        self.lens: Any = None
        self.unset: Any = None  # nlens times SIZE_MAX, copied over lens before a batch

    def grow(self, needed: int) -> None:
        cap = max(needed, 2 * self.cap)
        self.buf = ffi.new("char[]", cap)
        self.cap = cap

    def lens_for(self, n: int) -> Any:
        if n > self.nlens:
            self.lens = ffi.new("size_t[]", n)
            self.unset = ffi.new("size_t[]", [_SIZE_MAX] * n)
            self.nlens = n
        return self.lens


_scratch = _Scratch()


def _bad_timeout(timeout: object) -> InvalidArgumentError:
    return InvalidArgumentError(_errno.EINVAL, f"timeout={timeout!r}: must be None or >= 0 (seconds)")


def _timeout_ns(timeout: Optional[float]) -> int:
    """The C timeout for a Python one: None waits forever, 0 never waits."""
    if timeout is None:
        return _FOREVER
    if timeout < 0:
        raise _bad_timeout(timeout)
    if timeout == 0:
        return 0
    return max(1, int(timeout * 1e9))


def _size_arg(name: str, value: int) -> int:
    """A size_t argument: an int from 0 to SIZE_MAX, else InvalidArgumentError."""
    value = operator.index(value)
    if not 0 <= value <= _SIZE_MAX:
        raise InvalidArgumentError(_errno.EINVAL, f"{name}={value}: {strerror(-_errno.EINVAL)}")
    return value


def _as_c_data(data: Buffer) -> tuple[Any, int]:
    """What to pass as `const void *` for a message, and its length in bytes."""
    if type(data) is bytes:
        return data, len(data)
    if isinstance(data, str):
        raise TypeError("a message is bytes-like, not str (encode it first)")
    view = memoryview(data)
    if not view.contiguous:
        raise ValueError("a message must be a contiguous buffer")
    return ffi.from_buffer(view), view.nbytes


def _pack_batch(msgs: Sequence[Buffer]) -> tuple[Any, Any]:
    """An eventq_buf array for msgs, and what must stay alive while it is used.

    Fast path: the messages joined into one buffer, and the array built as
    (address, length) machine words in an array.array, so the per-message
    work stays in C-level loops (setting struct fields from Python costs
    several times more). Anything unusual (not bytes-like, items wider than
    a byte) goes through the per-message path, which also gives the errors.
    """
    if _WORD is not None and _BUF_AS_WORDS:
        try:
            joined = b"".join(msgs)
            lens = list(map(len, msgs))
        except (TypeError, BufferError):
            pass
        else:
            if sum(lens) == len(joined):
                base = ffi.from_buffer(joined)
                words = [0] * (2 * len(lens))
                words[0::2] = _accumulate(lens[:-1], initial=int(ffi.cast("uintptr_t", base)))
                words[1::2] = lens
                arr = _array.array(_WORD, words)
                return ffi.cast("eventq_buf *", ffi.from_buffer(arr)), (arr, base)
    bufs = ffi.new("eventq_buf[]", len(msgs))
    keep = []  # the cdata that own the pointers in bufs
    for i, m in enumerate(msgs):
        c_data, n = _as_c_data(m)
        if type(c_data) is bytes:
            c_data = ffi.from_buffer(c_data)
        keep.append(c_data)
        b = bufs[i]
        b.data = c_data
        b.len = n
    return bufs, keep


def _opts(capacity: int, max_bytes: int, max_msg_size: int, low_water: Optional[int]) -> Any:
    """The eventq_chan_opts of a new channel."""
    opts = ffi.new("eventq_chan_opts *")
    rc = lib.eventq_chan_opts_init(opts, _OPTS_SIZE)
    if rc < 0:
        raise error_for(rc, "eventq_chan_opts_init")
    opts.capacity = _size_arg("capacity", capacity)
    opts.max_bytes = _size_arg("max_bytes", max_bytes)
    opts.max_msg_size = _size_arg("max_msg_size", max_msg_size)
    if low_water is not None:
        opts.low_water = _size_arg("low_water", low_water)
    return opts


def _fileno(sock: Any) -> int:
    """The fd of a socket object (anything with fileno()) or an fd number."""
    return sock if isinstance(sock, int) else sock.fileno()


def _max_msgs_arg(max_msgs: int) -> int:
    max_msgs = operator.index(max_msgs)
    if not 1 <= max_msgs <= 0x7FFFFFFF:
        raise InvalidArgumentError(_errno.EINVAL, f"max_msgs={max_msgs}: must be 1 to 2**31-1")
    return max_msgs


def _released() -> ValueError:
    return ValueError("operation on a released eventq channel handle")


_live_chans: "weakref.WeakSet[Chan]" = weakref.WeakSet()


def _forget_inherited() -> None:
    """In a forked child: an inherited handle shares its fds with the parent,
    and the header allows no call on it, eventq_chan_free included. Each
    is marked released and its destructor dropped (the parent's channel is
    untouched; the child may make new ones)."""
    for ch in list(_live_chans):
        p, ch._p = ch._p, None
        if p is not None:
            ffi.gc(p, None)
    _live_chans.clear()


os.register_at_fork(after_in_child=_forget_inherited)


class Chan:
    """A handle to a libeventq channel: a bounded FIFO of byte messages.

    Every message a send accepted is received exactly once, whole, and in
    the order its sender sent it (D1-D3 of docs/design.md), by any thread
    or event loop holding a handle. `fileno()` is readable exactly while
    messages are pending or the channel is closed (D4), so any event loop
    can wait on it.

    Timeouts are in seconds: None waits without limit, 0 never waits
    (`WouldBlockError`, a BlockingIOError, instead), a positive value waits at
    most that long (`eventq.TimeoutError`, a builtin TimeoutError).

    `close()` closes the channel for every handle (D6); `release()` frees
    this handle only. Used as a context manager, a handle is closed and
    released on exit. A handle is safe to use from many threads at once.

    `Chan.new_shared()` makes a channel shared with one other process
    (`send_to()`/`recv_from()` over a Unix socket, `export_fds()`/
    `import_fds()` for a child).
    """

    __slots__ = ("_p", "_recv_fd", "_send_fd", "_stash", "_final", "__weakref__")

    def __init__(
        self,
        capacity: int = lib.EVENTQ_DEFAULT_CAPACITY,
        *,
        max_bytes: int = 0,
        max_msg_size: int = 0,
        low_water: Optional[int] = None,
    ) -> None:
        """Creates a channel.

        capacity: most messages queued at once (1 to EVENTQ_MAX_CAPACITY,
        allocated up front). max_bytes: most bytes queued at once, 0 for no
        byte limit. max_msg_size: longest message accepted, 0 for 1 MiB (or
        max_bytes if smaller). low_water: queue depth at or below which the
        send fd rises again after the channel was full, and blocked
        senders resume (default capacity // 2; capacity - 1 resumes them at
        the first free slot).
        """
        opts = _opts(capacity, max_bytes, max_msg_size, low_water)
        out = ffi.new("eventq_chan **")
        rc = lib.eventq_chan_new(opts, out)
        if rc < 0:
            what = (
                f"channel options capacity={capacity} max_bytes={max_bytes} "
                f"max_msg_size={max_msg_size} low_water={low_water}"
            )
            raise error_for(rc, what)
        self._adopt(out[0])

    def _adopt(self, ptr: Any) -> None:
        final: list[Any] = [None]  # the last counters, as _stats_values

        def free(p: Any, final: list[Any] = final, lib: Any = lib, ffi: Any = ffi,
                 size: int = _STATS_SIZE) -> None:
            st = ffi.new("eventq_chan_stats *")
            if lib.eventq_chan_free_final(p, st, size) == 1:
                final[0] = _stats_values(st)

        self._final = final
        self._stash: collections.deque[bytes] = collections.deque()
        self._recv_fd = lib.eventq_chan_recv_fd(ptr)
        # Made by the library on the channel's first request (_send_fd_of):
        # a channel never waited on for room has one fd.
        self._send_fd = -1
        # The handle is freed when the last reference to this cdata goes:
        # release() drops the Chan's, and each call in progress holds one,
        # so a release never frees a handle under a running call.
        self._p = ffi.gc(ptr, free)
        _live_chans.add(self)

    @classmethod
    def _of(cls, ptr: Any) -> "Chan":
        """A Chan owning the new C handle ptr."""
        self = cls.__new__(cls)
        self._adopt(ptr)
        return self

    @classmethod
    def from_handle(cls, address: int) -> "Chan":
        """Wraps a C `eventq_chan *` (its address), taking ownership of it.

        For handles made by C code (eventq_chan_new, eventq_chan_clone):
        the Chan frees it on release; the C side must not.
        """
        address = operator.index(address)
        if address == 0:
            raise InvalidArgumentError(_errno.EINVAL, "from_handle(0): a NULL handle")
        return cls._of(ffi.cast("eventq_chan *", address))

    def _handle(self) -> Any:
        p = self._p
        if p is None:
            raise _released()
        return p

    def clone(self) -> "Chan":
        """A new handle to the same channel, released separately."""
        p = lib.eventq_chan_clone(self._handle())
        if p == ffi.NULL:
            raise MemoryError("eventq_chan_clone")
        return Chan._of(p)

    def clone_handle(self) -> int:
        """A new C handle (`eventq_chan *`, as an address) for C code.

        The C side owns it and frees it with eventq_chan_free.
        """
        p = lib.eventq_chan_clone(self._handle())
        if p == ffi.NULL:
            raise MemoryError("eventq_chan_clone")
        return int(ffi.cast("uintptr_t", p))

    def fileno(self) -> int:
        """The receive fd: readable exactly while messages are pending or the
        channel is closed. Poll it; never read, write or close it."""
        self._handle()
        return self._recv_fd

    def send_fileno(self) -> int:
        """The send fd: not readable while the channel is full and open;
        readable once it drained to low water, or is closed. The first call
        on the channel makes it (OSError EMFILE if no fd is left)."""
        return self._send_fd_of(self._handle())

    def _send_fd_of(self, p: Any) -> int:
        """The send fd, asked of the library the first time."""
        fd = self._send_fd
        if fd < 0:
            fd = lib.eventq_chan_send_fd(p)
            if fd < 0:
                raise error_for(fd, "send_fd")
            self._send_fd = fd
        return fd

    # --- sending -------------------------------------------------------------

    def _send_error(self, rc: int, n: int) -> Error:
        if rc == _EMSGSIZE:
            return MessageTooLargeError(n, strerror(rc) + ": longer than the channel's maximum message size")
        return error_for(rc, "send")

    def _send_once(self, p: Any, data: Any, n: int, ns: int) -> bool:
        """One eventq_chan_send; False when there was no room in time."""
        rc = _c_send(p, data, n, ns)
        if rc == 0:
            return True
        if rc == _EAGAIN or rc == _ETIMEDOUT:
            return False
        raise self._send_error(rc, n)

    def send(self, data: Buffer, timeout: Optional[float] = None) -> None:
        """Queues a copy of `data`, waiting for room as `timeout` says.

        Raises ClosedError after close, MessageTooLargeError if it exceeds the
        maximum message size, WouldBlockError/TimeoutError when there was no room;
        on any error nothing was queued.
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p = self._handle()
        c_data, n = _as_c_data(data)
        rc = _c_send(p, c_data, n, 0)
        if rc == 0:
            return
        if rc != _EAGAIN:
            raise self._send_error(rc, n)
        self._wait(p, timeout, _SEND_FD, lambda ns: self._send_once(p, c_data, n, ns))

    def _wait(self, p: Any, timeout: Optional[float], fd: int, attempt: Any) -> Any:
        """Retries `attempt(timeout_ns)` (which returns _NOTHING or False when
        it got nothing) until it succeeds or the timeout runs out, polling fd
        (_SEND_FD: the send fd, made only if polled)."""
        ns = _timeout_ns(timeout)
        if ns == 0:
            raise WouldBlockError(_errno.EAGAIN, strerror(_EAGAIN))
        if threading.current_thread() is not _MAIN:
            r = attempt(ns)
            if r is not _NOTHING and r is not False:
                return r
            raise TimeoutError(_errno.ETIMEDOUT, strerror(_ETIMEDOUT))
        if fd == _SEND_FD:
            fd = self._send_fd_of(p)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ready = poll_fd(fd, deadline)
            r = attempt(0)
            if r is not _NOTHING and r is not False:
                return r
            if not ready:
                raise TimeoutError(_errno.ETIMEDOUT, strerror(_ETIMEDOUT))

    def _batch_sender(self, p: Any, msgs: Sequence[Buffer]) -> Any:
        """attempt(timeout_ns) for _wait: one eventq_chan_send_batch of msgs,
        returning how many were queued, or _NOTHING when there was no room."""
        count = len(msgs)
        bufs, keep = _pack_batch(msgs)
        first_len = bufs[0].len

        def attempt(ns: int, keep: Any = keep) -> Any:
            rc = _c_send_batch(p, bufs, count, ns)
            if rc > 0:
                return rc
            if rc == _EAGAIN or rc == _ETIMEDOUT:
                return _NOTHING
            if rc == _EMSGSIZE:
                raise MessageTooLargeError(
                    first_len, strerror(rc) + ": the first message is longer than the channel's maximum"
                )
            raise error_for(rc, "send_batch")

        return attempt

    def send_batch(self, msgs: Sequence[Buffer], timeout: Optional[float] = None) -> int:
        """Queues copies of a prefix of `msgs`, in order, as many as fit.

        Waits (as `timeout` says) only until the first fits, and returns how
        many were queued; the rest were not and stay the caller's. Raises
        as send() when not even the first could be queued.
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p = self._handle()
        if not msgs:
            return 0
        attempt = self._batch_sender(p, msgs)
        r = attempt(0)
        if r is _NOTHING:
            r = self._wait(p, timeout, _SEND_FD, attempt)
        return r

    # --- receiving -----------------------------------------------------------

    def _take(self, p: Any, ns: int) -> Any:
        """One receive into this thread's scratch buffer: the message as bytes,
        or _NOTHING when none came within ns; grows the buffer as needed."""
        s = _scratch
        lenp = s.lenp
        while True:
            buf, cap = s.buf, s.cap
            lenp[0] = _SIZE_MAX
            try:
                rc = _c_recv(p, buf, cap, lenp, ns)
                if rc == 0:
                    return _unpack(buf, lenp[0])
            except BaseException:
                # Interrupted (a signal handler raised) after the C call: a
                # message it took is kept for the next receive.
                if lenp[0] <= cap:
                    self._stash.append(_unpack(buf, lenp[0]))
                raise
            if rc == _EAGAIN or rc == _ETIMEDOUT:
                return _NOTHING
            if rc == _EMSGSIZE:
                s.grow(lenp[0])
                continue
            raise error_for(rc, "receive")

    def _unstash(self) -> Any:
        try:
            return self._stash.popleft()
        except IndexError:
            return _NOTHING

    def _recv_now(self, unstash: Any, take: Any) -> Any:
        """The part of every receive that does not wait: what an interrupted
        receive kept (`unstash()`), else `take(p, 0)`. Returns (p, result);
        result is _NOTHING when the caller must wait with `take`."""
        if self._stash:
            r = unstash()
            if r is not _NOTHING:
                return None, r
        p = self._handle()
        return p, take(p, 0)

    def recv(self, timeout: Optional[float] = None) -> bytes:
        """Receives the next message, waiting as `timeout` says.

        Raises ClosedError at end of stream (closed and drained), WouldBlockError or
        TimeoutError when no message came.
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p, m = self._recv_now(self._unstash, self._take)
        if m is not _NOTHING:
            return m
        return self._wait(p, timeout, self._recv_fd, lambda ns: self._take(p, ns))

    def recv_into(self, buffer: Union[bytearray, memoryview], timeout: Optional[float] = None) -> int:
        """Receives the next message into `buffer` (writable, contiguous) and
        returns its length.

        Raises MessageTooLargeError (with `needed`) if the buffer is too small:
        the message stays queued (D7). Otherwise as recv().
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        try:
            view = ffi.from_buffer(buffer, require_writable=True)
        except BufferError as e:
            raise TypeError(f"recv_into needs a writable contiguous buffer, not {type(buffer).__name__}") from e
        cap = len(view)
        if self._stash:
            m = self._unstash()
            if m is not _NOTHING:
                if len(m) > cap:
                    self._stash.appendleft(m)
                    raise MessageTooLargeError(len(m))
                ffi.memmove(view, m, len(m))
                return len(m)
        p = self._handle()
        lenp = ffi.new("size_t *")

        def attempt(ns: int) -> Any:
            lenp[0] = _SIZE_MAX
            try:
                rc = _c_recv(p, view, cap, lenp, ns)
                if rc == 0:
                    return lenp[0]
            except BaseException:
                if lenp[0] <= cap:
                    self._stash.append(_unpack(view, lenp[0]))
                raise
            if rc == _EAGAIN or rc == _ETIMEDOUT:
                return _NOTHING
            if rc == _EMSGSIZE:
                raise MessageTooLargeError(lenp[0])
            raise error_for(rc, "receive")

        n = attempt(0)
        if n is not _NOTHING:
            return n
        return self._wait(p, timeout, self._recv_fd, attempt)

    def _take_batch(self, p: Any, max_msgs: int, ns: int) -> Any:
        """One eventq_chan_recv_batch into this thread's scratch buffer."""
        s = _scratch
        lens = s.lens_for(max_msgs)
        while True:
            buf, cap = s.buf, s.cap
            ffi.memmove(lens, s.unset, max_msgs * _SIZE_T)
            try:
                rc = _c_recv_batch(p, buf, cap, lens, max_msgs, ns)
                if rc > 0:
                    sizes = _unpack(lens, rc)
                    data = _unpack(buf, sum(sizes))
                    out = []
                    off = 0
                    for n in sizes:
                        out.append(data[off : off + n])
                        off += n
                    return out
            except BaseException:
                self._salvage_batch(buf, cap, lens, max_msgs)
                raise
            if rc == _EAGAIN or rc == _ETIMEDOUT:
                return _NOTHING
            if rc == _EMSGSIZE:
                s.grow(lens[0])
                continue
            raise error_for(rc, "receive batch")

    def _salvage_batch(self, buf: Any, cap: int, lens: Any, max_msgs: int) -> None:
        """Stashes what an interrupted batch receive took: the leading lengths
        the C call wrote (each slot was SIZE_MAX before it)."""
        if lens[0] > cap:
            return
        off = 0
        for i in range(max_msgs):
            n = lens[i]
            if n == _SIZE_MAX or off + n > cap:
                break
            self._stash.append(_unpack(buf + off, n))
            off += n

    def _unstash_batch(self, max_msgs: int) -> Any:
        out: list[bytes] = []
        while len(out) < max_msgs:
            m = self._unstash()
            if m is _NOTHING:
                break
            out.append(m)
        return out or _NOTHING

    def _recv_batch_now(self, max_msgs: int, timeout: Optional[float]) -> tuple[Any, Any, Any]:
        """The checks and the first, non-waiting attempt of both batch
        receives: (handle, messages or _NOTHING, retry(ns) for the wait)."""
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        max_msgs = _max_msgs_arg(max_msgs)

        def take(p: Any, ns: int) -> Any:
            return self._take_batch(p, max_msgs, ns)

        p, msgs = self._recv_now(lambda: self._unstash_batch(max_msgs), take)
        return p, msgs, lambda ns: take(p, ns)

    def recv_batch(self, max_msgs: int = 64, timeout: Optional[float] = None) -> list[bytes]:
        """Receives up to `max_msgs` messages in one call (at least one),
        waiting as `timeout` says only for the first. Raises as recv()."""
        p, msgs, retry = self._recv_batch_now(max_msgs, timeout)
        if msgs is not _NOTHING:
            return msgs
        return self._wait(p, timeout, self._recv_fd, retry)

    def __iter__(self) -> Iterator[bytes]:
        """Yields each message (blocking) until end of stream."""
        while True:
            try:
                m = self.recv()
            except ClosedError:
                return
            yield m

    # --- asyncio -------------------------------------------------------------

    async def _await(self, p: Any, timeout: Optional[float], fd: int, attempt: Any) -> Any:
        """asyncio twin of _wait: waits for fd in the running loop, then
        retries attempt(0) in the coroutine (never in a callback)."""
        if timeout == 0:
            raise WouldBlockError(_errno.EAGAIN, strerror(_EAGAIN))
        if fd == _SEND_FD:
            fd = self._send_fd_of(p)
        import asyncio  # here, not at the top: thread users never import it

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            ready = await wait_readable(fd, deadline)
            r = attempt(0)
            if r is not _NOTHING and r is not False:
                return r
            if not ready:
                raise TimeoutError(_errno.ETIMEDOUT, strerror(_ETIMEDOUT))

    async def recv_async(self, timeout: Optional[float] = None) -> bytes:
        """recv() for asyncio: waits on the receive fd in the running loop.

        Cancelling it loses nothing: a message is taken only by the
        coroutine itself, after the wait, with no await in between.
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p, m = self._recv_now(self._unstash, self._take)
        if m is not _NOTHING:
            return m
        return await self._await(p, timeout, self._recv_fd, lambda ns: self._take(p, ns))

    async def recv_batch_async(self, max_msgs: int = 64, timeout: Optional[float] = None) -> list[bytes]:
        """recv_batch() for asyncio (see recv_async)."""
        p, msgs, retry = self._recv_batch_now(max_msgs, timeout)
        if msgs is not _NOTHING:
            return msgs
        return await self._await(p, timeout, self._recv_fd, retry)

    async def send_async(self, data: Buffer, timeout: Optional[float] = None) -> None:
        """send() for asyncio: waits on the send fd in the running loop."""
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p = self._handle()
        c_data, n = _as_c_data(data)
        if self._send_once(p, c_data, n, 0):
            return
        await self._await(p, timeout, _SEND_FD, lambda ns: self._send_once(p, c_data, n, ns))

    async def send_batch_async(self, msgs: Sequence[Buffer], timeout: Optional[float] = None) -> int:
        """send_batch() for asyncio: returns how many were queued."""
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        p = self._handle()
        if not msgs:
            return 0
        attempt = self._batch_sender(p, msgs)
        r = attempt(0)
        if r is _NOTHING:
            r = await self._await(p, timeout, _SEND_FD, attempt)
        return r

    def __aiter__(self) -> AsyncIterator[bytes]:
        """`async for msg in chan`: each message until end of stream."""
        return _AsyncMessages(self)

    # --- between processes ---------------------------------------------------

    @classmethod
    def new_shared(
        cls,
        capacity: int = lib.EVENTQ_DEFAULT_CAPACITY,
        *,
        side: Side,
        max_msg_size: int = 0,
        low_water: Optional[int] = None,
    ) -> "Chan":
        """Creates a channel to share with one other process, and returns the
        handle of this process's end, which does only `side`: a Side.SEND
        end sends and never receives, a Side.RECV end the reverse (the other
        kind of call raises WrongSideError). Hand the other end to the other
        process with send_to() (over a Unix socket) or export_fds() (for a
        child to inherit). Any number of threads may use each end.

        capacity and low_water as for Chan(); max_msg_size is fixed here,
        0 for 4096 (at most 16 MiB: every slot holds a whole message, in a
        memfd of about capacity * max_msg_size bytes, resident only as
        messages reach it). There is no byte limit.

        When the other process dies: if it was sending, every message its
        send returned for is received exactly once, then receives raise
        ClosedError (end of stream); if it was receiving, what its receives had
        taken is gone, the rest stays queued for a successor (send_to or
        export_fds again), and a send that finds the channel full raises
        ClosedError instead of waiting. close() from either process closes the
        channel for both. A process that breaks the protocol (writes the
        shared memory out of turn) makes this end's calls raise
        BrokenProtocolError; the channel is then closed on this side.

        fileno() and send_fileno() are epoll fds here, readable also once
        the other process is gone; asyncio and poll() wait on them as on
        any channel's.
        """
        side = Side(side)
        opts = _opts(capacity, 0, max_msg_size, low_water)
        out = ffi.new("eventq_chan **")
        rc = lib.eventq_chan_new_shared(opts, side, out)
        if rc < 0:
            raise error_for(rc, f"shared channel options capacity={capacity} max_msg_size={max_msg_size} "
                                f"low_water={low_water} side={side}")
        return cls._of(out[0])

    @property
    def side(self) -> Optional[Side]:
        """This end's side of a process-shared channel; None for a channel
        within this process."""
        code = lib.eventq_chan_side(self._handle())
        return Side(code) if code > 0 else None

    def send_to(self, sock: Any) -> None:
        """Hands the other end of this process-shared channel to the process
        at the other end of `sock`, a connected Unix socket (an object with
        fileno(), or an fd), which takes it with Chan.recv_from(): the
        channel's fds ride one SCM_RIGHTS message.

        Allowed while no other process holds that end: before the first
        handover, or once the one that held it is gone (the successor then
        finds what it had not taken still queued); AttachedError otherwise.
        InvalidArgumentError for a channel that is not process-shared;
        WouldBlockError if the socket is non-blocking and full; a plain
        BrokenPipeError (not ClosedError: the channel is fine) if its other end
        is closed.
        """
        rc = lib.eventq_chan_send_to(self._handle(), _fileno(sock))
        if rc == -_errno.EPIPE:  # the socket's peer, not the channel (ClosedError would say that)
            raise BrokenPipeError(_errno.EPIPE, "send_to: the socket's other end is closed")
        if rc < 0:
            raise error_for(rc, "send_to")

    @classmethod
    def recv_from(cls, sock: Any, timeout: Optional[float] = None) -> "Chan":
        """Takes the end of a process-shared channel that the process at the
        other end of `sock` (a connected Unix socket: an object with
        fileno(), or an fd) hands over with send_to().

        Waits for the handover as `timeout` says (in poll(), so Ctrl-C
        interrupts it; blocking or not, the socket is only read once it is
        readable). Everything received is checked first: BrokenProtocolError if
        it is not a channel's end (or the socket reached end of file).
        """
        if timeout is not None and timeout < 0:
            raise _bad_timeout(timeout)
        fd = _fileno(sock)
        deadline = None if timeout is None else time.monotonic() + timeout
        out = ffi.new("eventq_chan **")
        while poll_fd(fd, deadline):
            rc = lib.eventq_chan_recv_from(fd, out)
            if rc == 0:
                return cls._of(out[0])
            if rc != _EAGAIN:
                raise error_for(rc, "recv_from")
        if timeout == 0:
            raise WouldBlockError(_errno.EAGAIN, strerror(_EAGAIN))
        raise TimeoutError(_errno.ETIMEDOUT, strerror(_ETIMEDOUT))

    def export_fds(self) -> SharedFds:
        """The fds of the other end of this process-shared channel, for a
        child process to inherit:

            with tx.export_fds() as fds:   # closed here once the child runs
                child = subprocess.Popen(cmd, pass_fds=fds.fds,
                                         env={**os.environ, "MY_CHAN": str(fds)})
            # in the child: rx = eventq.Chan.import_fds(os.environ["MY_CHAN"])

        The same rule as send_to() for when it is allowed (AttachedError).
        """
        out = ffi.new("eventq_shared_fds *")
        rc = lib.eventq_chan_export_fds(self._handle(), out, ffi.sizeof("eventq_shared_fds"))
        if rc < 0:
            raise error_for(rc, "export_fds")
        return SharedFds(Side(out.side), out.mem, out.recv_bell, out.send_bell, out.link)

    @classmethod
    def import_fds(cls, fds: Union[SharedFds, str]) -> "Chan":
        """Takes an end of a process-shared channel from fds another process
        exported: the SharedFds, or their `str()` (in a child that inherited
        them with pass_fds, where the numbers are the same). The fds are
        made non-inheritable (a program this one runs does not hold the
        channel) and taken over: owned by the new Chan, or closed if the
        library refuses them. They are checked as recv_from() checks what it
        receives (BrokenProtocolError). A string not of the form raises
        InvalidArgumentError and takes nothing; SharedFds already closed or
        imported, ValueError.
        """
        if isinstance(fds, str):
            fds = SharedFds.parse(fds)
        c_fds = ffi.new("eventq_shared_fds *")
        c_fds.side = fds.side
        c_fds.mem, c_fds.recv_bell, c_fds.send_bell, c_fds.link = taken = fds._take()
        for fd in taken:
            with contextlib.suppress(OSError):  # a bad fd: the import says so
                os.set_inheritable(fd, False)
        out = ffi.new("eventq_chan **")
        rc = lib.eventq_chan_import_fds(c_fds, ffi.sizeof("eventq_shared_fds"), out)
        if rc < 0:
            raise error_for(rc, f"import_fds {fds}")
        return cls._of(out[0])

    def consumer(self) -> Consumer:
        """Counts a consumer in on this channel until it leaves: use it as
        `with chan.consumer(): ...` around a consumer's loop (see Consumer
        for when it matters)."""
        return Consumer(self._handle())

    # --- state ---------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel for every handle (D6): sends raise ClosedError from
        now on, queued messages stay receivable, then receives raise ClosedError;
        every waiter wakes. Closing again does nothing."""
        rc = lib.eventq_chan_close(self._handle())
        if rc < 0:
            raise error_for(rc, "close")

    def release(self) -> None:
        """Frees this handle (not the channel, unless it was the last handle:
        then what is still queued is dropped and counted in final_stats).
        Calls in progress on it finish first. Releasing again does nothing."""
        self._p = None

    @property
    def released(self) -> bool:
        """True once release() was called."""
        return self._p is None

    @property
    def final_stats(self) -> Optional[Stats]:
        """The channel's last counters (with `dropped`) if this handle was the
        last one and has been freed; else None."""
        values = self._final[0]
        return None if values is None else _make_stats(values)

    def stats(self) -> Stats:
        """A snapshot of the channel's counters."""
        st = ffi.new("eventq_chan_stats *")
        rc = lib.eventq_chan_get_stats(self._handle(), st, _STATS_SIZE)
        if rc < 0:
            raise error_for(rc, "stats")
        return _make_stats(_stats_values(st))

    def __enter__(self) -> "Chan":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            try:
                self.close()
            finally:
                self.release()

    def __repr__(self) -> str:
        if self._p is None:
            return "<eventq.Chan released>"
        send_fd = self._send_fd if self._send_fd >= 0 else "not made"
        side = self.side
        shared = f" side={side}" if side is not None else ""
        return f"<eventq.Chan fd={self._recv_fd} send_fd={send_fd}{shared}>"


class _AsyncMessages:
    """The async iterator of a Chan: recv_async until end of stream."""

    __slots__ = ("_chan",)

    def __init__(self, chan: Chan) -> None:
        self._chan = chan

    def __aiter__(self) -> "_AsyncMessages":
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._chan.recv_async()
        except ClosedError:
            raise StopAsyncIteration from None


__all__ = ["Chan"]
