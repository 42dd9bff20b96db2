# SPDX-License-Identifier: MIT OR Apache-2.0
"""Memory-pressure watches: cgroup v1 thresholds, OOM and pressure levels,
cgroup2 PSI triggers and memory.events, each a blocking or async iterator
of MemoryEvent, one per kernel wake-up with the kernel's count
(docs/memcg.md).

    cg = Cgroup.open("/sys/fs/cgroup/memory/job")
    async with memcg.threshold(cg, 512 << 20) as watch:
        async for ev in watch:          # ends after the REMOVED event
            print(ev.count, "crossing(s), usage now", ev.usage)

    with memcg.oom(cg) as watch:        # or in threads
        ev = watch.next(timeout=60)

No event loop of libeventq's and no thread per watch: each watch is one
registration with the kernel (an eventq_memcg_watch_* call) with an fd
that is readable while it has something to read (eventq_memcg_watch_fd).
A thread waits in poll() on it, asyncio with a reader on it, and the event
is read with eventq_memcg_watch_read, the read a libeventq loop makes.
Registration happens when the watch is made, so a missing controller or
permission is raised there, as a CgroupError with the library's
explanation (eventq_strerror). This module imports asyncio only when a
watch is awaited.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import errno as _errno
import operator
import os
import select
import threading
import time
import weakref
from typing import Any, Callable, Optional, Union

from ._errors import Error, InvalidArgumentError, TimeoutError, WouldBlockError, strerror
from ._ffi import ffi, lib

#: Longest a main-thread wait sleeps before it checks for signals another
#: thread received (as eventq._wait.SIGNAL_SLICE; a signal to the main
#: thread ends the wait at once).
SIGNAL_SLICE = 0.1

__all__ = [
    "Cgroup",
    "CgroupError",
    "CgroupNotFoundError",
    "CgroupPermissionError",
    "Kind",
    "Level",
    "Mode",
    "Delta",
    "MemoryEvent",
    "Watch",
    "WatchClosedError",
    "WatchEndedError",
    "threshold",
    "oom",
    "pressure_level",
    "psi",
    "events",
]


class CgroupError(Error):
    """A memory-cgroup call failed; `errno` says what is missing.

    ENOENT: no such cgroup; ENODEV: the controller or interface is not
    there (cgroup v1 memory controller not mounted, cgroup2 memory
    controller not enabled, a v1 interface asked of a cgroup2 cgroup);
    EACCES/EPERM: no permission (EPERM also for a PSI window that is not a
    multiple of 2 s without CAP_SYS_RESOURCE); EOPNOTSUPP: no PSI.
    """


class CgroupNotFoundError(CgroupError, FileNotFoundError):
    """ENOENT: the directory does not exist, is not a cgroup, or was removed."""


class CgroupPermissionError(CgroupError, PermissionError):
    """EACCES/EPERM: the cgroup's control file cannot be opened or written."""


class _CgroupInvalidError(CgroupError, InvalidArgumentError):
    """EINVAL: a bad argument (a PSI window outside 500 ms..10 s, ...)."""


_CLASSES: dict[int, type[CgroupError]] = {
    _errno.ENOENT: CgroupNotFoundError,
    _errno.EACCES: CgroupPermissionError,
    _errno.EPERM: CgroupPermissionError,
    _errno.EINVAL: _CgroupInvalidError,
}


def _error(rc: int, what: str) -> CgroupError:
    return _CLASSES.get(-rc, CgroupError)(-rc, f"{what}: {strerror(rc)}")


class Kind(enum.IntEnum):
    """What a memory source reported (MemoryEvent.kind)."""

    THRESHOLD = lib.EVENTQ_MEMCG_THRESHOLD  #: usage crossed the threshold, up or down, `count` times
    OOM = lib.EVENTQ_MEMCG_OOM  #: the cgroup hit its limit `count` times
    PRESSURE = lib.EVENTQ_MEMCG_PRESSURE  #: memory.pressure_level notified `count` times
    PSI = lib.EVENTQ_MEMCG_PSI  #: a PSI trigger fired
    CHANGED = lib.EVENTQ_MEMCG_CHANGED  #: counters of memory.events (or another file) changed
    REMOVED = lib.EVENTQ_MEMCG_REMOVED  #: the cgroup was removed; the watch ends after this


class Level(enum.IntEnum):
    """memory.pressure_level levels."""

    LOW = lib.EVENTQ_MEMCG_LOW
    MEDIUM = lib.EVENTQ_MEMCG_MEDIUM
    CRITICAL = lib.EVENTQ_MEMCG_CRITICAL


class Mode(enum.IntEnum):
    """memory.pressure_level modes: DEFAULT notifies for the level and above,
    also for descendants unless one of theirs took it; HIERARCHY always
    also for descendants; LOCAL only for the cgroup's own reclaim."""

    DEFAULT = lib.EVENTQ_MEMCG_MODE_DEFAULT
    HIERARCHY = lib.EVENTQ_MEMCG_MODE_HIERARCHY
    LOCAL = lib.EVENTQ_MEMCG_MODE_LOCAL


@dataclasses.dataclass(frozen=True)
class Delta:
    """A counter that changed (Kind.CHANGED)."""

    name: str
    value: int  #: its new value
    delta: int  #: its change since the previous read


@dataclasses.dataclass(frozen=True)
class MemoryEvent:
    """One wake-up of a memory source, copied out of the C event.

    Fields that do not apply to `kind` are 0, False, None or empty.
    """

    kind: Kind
    #: cgroup v1 sources: the kernel's notifications since the last event
    #: (none is merged away); PSI: 1.
    count: int
    #: what the source watches: the control file and its arguments
    spec: str
    threshold: int = 0  #: THRESHOLD: the registered threshold in bytes
    usage: int = 0  #: THRESHOLD: memory.usage_in_bytes just after the wake-up
    under_oom: bool = False  #: OOM: memory.oom_control's under_oom just after
    oom_kill: int = 0  #: OOM: memory.oom_control's oom_kill just after
    level: Optional[Level] = None  #: PRESSURE: the registered level
    mode: Optional[Mode] = None  #: PRESSURE: the registered mode
    psi_full: bool = False  #: PSI: a "full" trigger (else "some")
    psi_stall_us: int = 0  #: PSI: the trigger's stall
    psi_window_us: int = 0  #: PSI: the trigger's window
    deltas: tuple[Delta, ...] = ()  #: CHANGED: the counters that changed, in file order


def _event_of(ev: Any) -> MemoryEvent:
    kind = Kind(ev.kind)
    fields: dict[str, Any] = {"kind": kind, "count": ev.count, "spec": ffi.string(ev.spec).decode()}
    if kind == Kind.THRESHOLD:
        fields.update(threshold=ev.threshold, usage=ev.usage)
    elif kind == Kind.OOM:
        fields.update(under_oom=bool(ev.under_oom), oom_kill=ev.oom_kill)
    elif kind == Kind.PRESSURE:
        fields.update(level=Level(ev.level), mode=Mode(ev.mode))
    elif kind == Kind.PSI:
        fields.update(
            psi_full=ev.psi_kind == lib.EVENTQ_MEMCG_PSI_FULL,
            psi_stall_us=ev.psi_stall_us,
            psi_window_us=ev.psi_window_us,
        )
    elif kind == Kind.CHANGED:
        fields["deltas"] = tuple(
            Delta(ffi.string(d.name).decode(), d.value, d.delta) for d in ev.deltas[0 : ev.ndeltas]
        )
    return MemoryEvent(**fields)


class Cgroup:
    """A memory cgroup: its cgroup v1 `memory` directory, its cgroup2
    directory, or both (hybrid systems). Watches made with it do not need
    it afterwards."""

    __slots__ = ("_p", "v1_dir", "v2_dir", "__weakref__")

    v1_dir: Optional[str]  #: the cgroup v1 memory directory, None if none
    v2_dir: Optional[str]  #: the cgroup2 directory, None if none

    def __init__(self, path: Union[str, bytes, "os.PathLike[str]"]) -> None:
        """The cgroup at directory `path` (cgroup v1 memory hierarchy or cgroup2)."""
        raw = os.fsencode(path)
        out = ffi.new("eventq_memcg **")
        rc = lib.eventq_memcg_open(raw, out)
        if rc < 0:
            raise _error(rc, f"cgroup {os.fsdecode(raw)}")
        self._adopt(out[0])

    @classmethod
    def own(cls) -> "Cgroup":
        """The calling process's memory cgroup (/proc/self/cgroup and the mounts)."""
        out = ffi.new("eventq_memcg **")
        rc = lib.eventq_memcg_own(out)
        if rc < 0:
            raise _error(rc, "own memory cgroup")
        self = cls.__new__(cls)
        self._adopt(out[0])
        return self

    @classmethod
    def open(cls, path: Union[str, bytes, "os.PathLike[str]"]) -> "Cgroup":
        """Same as Cgroup(path)."""
        return cls(path)

    def _adopt(self, p: Any) -> None:
        self._p = ffi.gc(p, lib.eventq_memcg_free)
        _live_cgroups.add(self)
        self.v1_dir = self._dir(lib.EVENTQ_MEMCG_V1)
        self.v2_dir = self._dir(lib.EVENTQ_MEMCG_V2)

    def _dir(self, version: int) -> Optional[str]:
        n = lib.eventq_memcg_dir(self._p, version, ffi.NULL, 0)
        if n == -_errno.ENODEV:
            return None
        if n < 0:
            raise _error(n, "eventq_memcg_dir")
        buf = ffi.new("char[]", n + 1)
        n = lib.eventq_memcg_dir(self._p, version, buf, n + 1)
        if n < 0:
            raise _error(n, "eventq_memcg_dir")
        return ffi.string(buf, n).decode(errors="surrogateescape")

    def _handle(self) -> Any:
        if self._p is None:
            raise ValueError("operation on a closed eventq Cgroup")
        return self._p

    def close(self) -> None:
        """Frees the handle (watches made with it keep working)."""
        self._p = None

    def __enter__(self) -> "Cgroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<eventq.memcg.Cgroup v1={self.v1_dir!r} v2={self.v2_dir!r}>"


_IN = lib.EVENTQ_IN
_EAGAIN = -_errno.EAGAIN
_ENOENT = -_errno.ENOENT


def _merge(old: MemoryEvent, new: MemoryEvent) -> Optional[MemoryEvent]:
    """Two events of one kind not yet taken, as one, the way the kernel
    merges notifications not yet read: counts add up (a PSI trigger is a
    flag: 1), the other fields are the newer's, and counters deltas add up
    (a counter back to where it was drops out). None if nothing is left."""
    if new.kind in (Kind.THRESHOLD, Kind.OOM, Kind.PRESSURE):
        return dataclasses.replace(new, count=old.count + new.count)
    if new.kind == Kind.PSI:
        return new
    deltas: dict[str, Delta] = {d.name: d for d in old.deltas}
    for d in new.deltas:
        was = deltas.get(d.name)
        deltas[d.name] = Delta(d.name, d.value, d.delta + (was.delta if was else 0))
    kept = tuple(d for d in deltas.values() if d.delta != 0)
    return dataclasses.replace(new, deltas=kept) if kept else None


class _State:
    """A watch's state, shared by the Watch (the caller's handle), threads
    waiting in next() and the asyncio reader. The event loop's reader holds
    this, never the Watch, so a forgotten Watch is still collected (its
    __del__ closes this). `lock` guards every field and serialises the C
    reads (eventq_memcg_watch_read is one thread at a time)."""

    def __init__(self, p: Any, what: str) -> None:
        self.p = p  # the C watch; None once freed
        self.what = what
        self.fd: int = lib.eventq_memcg_watch_fd(p)
        self.out = ffi.new("const eventq_memcg_event **")
        self.lock = threading.Lock()
        self.closed = False
        self.ended = False  # REMOVED was read: nothing more will come
        #: a poll of the fd reported it readable, and no read took its flag
        #: yet (for PSI that report is the firing: the poll took it).
        self.ready = False
        self.failure: Optional[BaseException] = None  # a failed read, for the next taker
        self.events: collections.deque[MemoryEvent] = collections.deque()  # read, not yet taken
        self.users = 0  # threads waiting in poll() on fd and the wake pipe
        self.wake: Optional[tuple[int, int]] = None  # written at close, never read
        self.loop: Any = None  # the asyncio loop whose reader is registered
        self.unregistering = False  # that reader's removal is scheduled on its loop
        self.waiters: list[Any] = []  # asyncio futures of next_async()

    # --- under lock ------------------------------------------------------------

    def read(self, revents: int = 0) -> Optional[MemoryEvent]:
        """One C read; the pending poll flag goes with it."""
        if self.ready:
            revents |= _IN
            self.ready = False
        rc = lib.eventq_memcg_watch_read(self.p, revents, self.out)
        if rc == 0:
            ev = _event_of(self.out[0])
            if ev.kind == Kind.REMOVED:
                self.ended = True
            return ev
        if rc == _EAGAIN:
            return None
        if rc == _ENOENT:
            self.ended = True
            return None
        raise _error(rc, f"{self.what}: reading the watch")

    def take(self) -> Optional[MemoryEvent]:
        """The next event: one read already, else a C read; None if there
        is none (check `ended`). Raises WatchClosedError and a read's failure."""
        if self.closed:
            raise WatchClosedError(_errno.EBADF, f"{self.what}: the watch is closed")
        if self.events:
            return self.events.popleft()
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self.ended:
            return None
        return self.read()

    def notify(self) -> None:
        """Wakes the coroutines waiting in next_async()."""
        if self.waiters:
            import asyncio

            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            for fut in self.waiters:
                if fut.done():
                    continue
                if fut.get_loop() is running:
                    fut.set_result(True)
                else:
                    try:
                        fut.get_loop().call_soon_threadsafe(_resolve, fut)
                    except RuntimeError:  # that loop is closed
                        pass
            self.waiters = []

    def free_if_unused(self) -> None:
        """Frees the C watch (closing its fds) once closed and nothing uses
        its fd: no thread in poll(), no reader registered."""
        if self.closed and self.p is not None and not self.users and self.loop is None and not self.unregistering:
            lib.eventq_memcg_watch_free(self.p)
            self.p = None
            if self.wake is not None:
                os.close(self.wake[0])
                os.close(self.wake[1])
                self.wake = None

    def drop_reader(self) -> None:
        """Removes the asyncio reader: now in its loop's thread, else
        scheduled there (the fd stays open until then)."""
        loop, self.loop = self.loop, None
        if loop is None:
            return
        import asyncio

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.remove_reader(self.fd)
            return
        try:
            loop.call_soon_threadsafe(self.unregister, loop)
            self.unregistering = True
        except RuntimeError:  # closed: its selector is gone with it
            pass

    # --- unlocked entry points ---------------------------------------------------

    def unregister(self, loop: Any) -> None:
        """In the loop's thread: the scheduled removal of its reader."""
        loop.remove_reader(self.fd)
        with self.lock:
            self.unregistering = False
            self.free_if_unused()

    def on_readable(self) -> None:
        """The asyncio reader: the loop's poll reported the fd readable (for
        PSI that poll took the firing), so read now, with its flag, until
        nothing is left, and wake the waiters. Events not yet taken merge,
        as the kernel merges what is not read. Registered from the first
        wait until the watch ends or is closed: a reader removed between
        waits could lose a firing the loop's poll took."""
        with self.lock:
            if self.closed or self.p is None:
                return
            self.ready = True
            try:
                while not self.ended:
                    ev = self.read()
                    if ev is None:
                        break
                    last = self.events[-1] if self.events else None
                    if last is not None and last.kind == ev.kind and ev.kind != Kind.REMOVED:
                        self.events.pop()
                        merged = _merge(last, ev)
                        if merged is not None:
                            self.events.append(merged)
                    else:
                        self.events.append(ev)
            except CgroupError as e:
                self.failure = e
            if self.ended or self.failure is not None:
                self.drop_reader()
            self.notify()


def _resolve(fut: Any) -> None:
    if not fut.done():
        fut.set_result(True)


class WatchClosedError(CgroupError, ValueError):
    """EBADF: the watch was closed (close(), `with`, or garbage collection);
    waiters in next() and next_async() wake with it."""


class WatchEndedError(CgroupNotFoundError):
    """ENOENT: the watch's cgroup was removed and its last event, REMOVED,
    was returned: nothing more will come."""


# The names of 0.2, kept for the 0.x releases.
CgroupNotFound = CgroupNotFoundError
WatchClosed = WatchClosedError
WatchEnded = WatchEndedError


class Watch:
    """One memory watch, waited on without a loop or a thread of its own.

    `watch.next(timeout=None)` waits in the calling thread (poll() on the
    watch's fd); `await watch.next_async()` and `async for ev in watch` wait
    in the running asyncio loop (a reader on the fd). Both return one
    MemoryEvent at a time with the kernel's count; the REMOVED event is the
    last of a watch whose cgroup is removed (then next() raises WatchEndedError
    and iteration ends). A system-wide PSI trigger never ends. close() (or
    `with`/`async with`) unregisters the watch and frees its fds; waiters
    then wake with WatchClosedError. Any number of threads may wait at once, or
    coroutines of one asyncio loop, not both (RuntimeError): each event
    goes to one of them.

    Any other poller can wait too: poll `fileno()` for POLLIN, then call
    `read(revents)` with the flags the poll reported. A PSI trigger's
    firing is a flag in the kernel that the first poll of the trigger's file
    clears, and polling this fd polls that file: the poll that reports the
    fd readable took the firing, and `read(POLLIN)` reports it. So no poll
    report may be dropped; the waits here never drop one.
    """

    def __init__(self, what: str, make: Callable[[Any], int]) -> None:
        """`make(out)` is an eventq_memcg_watch_* call writing to `out`."""
        self.what = what  #: what is watched, for messages
        w = ffi.new("eventq_memcg_watch **")
        rc = make(w)
        if rc < 0:
            raise _error(rc, what)
        self._st = _State(w[0], what)
        _live_watches.add(self)

    def fileno(self) -> int:
        """The watch's fd: readable (POLLIN) while it has something to read;
        then call read() with the poll's flags. It belongs to the watch."""
        with self._st.lock:
            if self._st.closed:
                raise WatchClosedError(_errno.EBADF, f"{self.what}: the watch is closed")
            return self._st.fd

    @property
    def ended(self) -> bool:
        """Whether the REMOVED event was read: nothing more will come."""
        return self._st.ended

    def read(self, revents: int = 0) -> Optional[MemoryEvent]:
        """The next event without waiting, or None. `revents` are the flags a
        poll of fileno() reported just before (select.POLLIN), 0 without one:
        for PSI, POLLIN is the firing that poll took from the kernel."""
        st = self._st
        with st.lock:
            if revents & _IN:
                st.ready = True
            return st.take()

    def poll(self) -> list[MemoryEvent]:
        """The events that are ready now, without waiting."""
        out: list[MemoryEvent] = []
        with self._st.lock:
            while (ev := self._st.take()) is not None:
                out.append(ev)
        return out

    def next(self, timeout: Optional[float] = None) -> MemoryEvent:
        """The next event, waiting in this thread (poll() on the watch's fd)
        for at most `timeout` seconds (None: without limit; 0: not at all).

        Raises WouldBlockError (timeout 0) or TimeoutError when nothing came,
        WatchEndedError after the REMOVED event, WatchClosedError once the watch is
        closed (also while waiting), and the CgroupError of a failed read.
        In the main thread a signal's handler runs while it waits (Ctrl-C
        interrupts it, losing nothing).
        """
        if timeout is not None and timeout < 0:
            raise _CgroupInvalidError(_errno.EINVAL, f"timeout={timeout}: {strerror(-_errno.EINVAL)}")
        st = self._st
        deadline = None if timeout is None else time.monotonic() + timeout
        with st.lock:
            ev = st.take()
            if ev is not None:
                return ev
            self._check_ended()
            if timeout == 0:
                raise WouldBlockError(_errno.EAGAIN, f"{self.what}: no event")
            if st.loop is not None:
                if not st.loop.is_closed():
                    raise RuntimeError(f"{self.what}: the watch is awaited in an event loop; wait there")
                st.loop = None  # its selector is gone with it
            if st.wake is None:
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                st.wake = (r, w)
            st.users += 1
            fd, wake = st.fd, st.wake[0]
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(wake, select.POLLIN)
            main = threading.current_thread() is threading.main_thread()
            while True:
                if deadline is None:
                    ms = int(SIGNAL_SLICE * 1000) if main else None
                else:
                    left = deadline - time.monotonic()
                    ms = max(0, int(min(left, SIGNAL_SLICE if main else left) * 1000 + 0.999))
                ready = dict(poller.poll(ms))
                with st.lock:
                    if ready.get(fd, 0) & select.POLLIN:
                        st.ready = True  # this poll may have taken a PSI firing: its read gets it
                    ev = st.take()
                    if ev is not None:
                        return ev
                    self._check_ended()
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(_errno.ETIMEDOUT, f"{self.what}: no event within {timeout} s")
        finally:
            with st.lock:
                st.users -= 1
                st.free_if_unused()

    def _check_ended(self) -> None:
        if self._st.ended:
            raise WatchEndedError(
                _errno.ENOENT, f"{self.what}: the cgroup was removed (its REMOVED event was the last)"
            )

    async def next_async(self, timeout: Optional[float] = None) -> MemoryEvent:
        """next() for asyncio: waits in the running loop, on a reader of the
        watch's fd, registered from the first wait until the watch ends or
        is closed. Cancelling it loses nothing (the reader reads; events
        not yet taken wait for the next call, merged as the kernel merges
        unread notifications). Raises as next()."""
        import asyncio

        if timeout is not None and timeout < 0:
            raise _CgroupInvalidError(_errno.EINVAL, f"timeout={timeout}: {strerror(-_errno.EINVAL)}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        st = self._st
        while True:
            with st.lock:
                ev = st.take()
                if ev is not None:
                    return ev
                self._check_ended()
                if timeout == 0:
                    raise WouldBlockError(_errno.EAGAIN, f"{self.what}: no event")
                if st.loop is not loop:
                    if st.loop is not None and not st.loop.is_closed():
                        raise RuntimeError(f"{self.what}: the watch is awaited in another event loop")
                    if st.users:
                        raise RuntimeError(f"{self.what}: threads wait on the watch in next(); wait there")
                    # After the read above, so no firing is pending when the
                    # loop's registration polls the fd.
                    loop.add_reader(st.fd, st.on_readable)
                    st.loop = loop
                fut = loop.create_future()
                st.waiters.append(fut)
            try:
                if deadline is None:
                    await fut
                else:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise TimeoutError(_errno.ETIMEDOUT, f"{self.what}: no event within {timeout} s")
                    try:
                        await asyncio.wait_for(fut, left)
                    except asyncio.TimeoutError:
                        raise TimeoutError(_errno.ETIMEDOUT, f"{self.what}: no event within {timeout} s") from None
            finally:
                with st.lock:
                    if fut in st.waiters:
                        st.waiters.remove(fut)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> MemoryEvent:
        """next(), ending the iteration at the end of the watch or its close."""
        try:
            return self.next()
        except (WatchEndedError, WatchClosedError):
            raise StopIteration from None

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> MemoryEvent:
        """next_async(), ending the iteration at the end of the watch or its close."""
        try:
            return await self.next_async()
        except (WatchEndedError, WatchClosedError):
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Unregisters the watch and frees its fds (once no thread waits on
        them); waiters wake with WatchClosedError. Idempotent; from any thread."""
        st = self._st
        with st.lock:
            if st.closed:
                return
            st.closed = True
            st.events.clear()
            st.drop_reader()
            st.notify()
            if st.wake is not None:
                os.write(st.wake[1], b"x")  # readable for good: every thread in next() wakes
            st.free_if_unused()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Watch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._st.closed else " ended" if self._st.ended else ""
        return f"<eventq.memcg.Watch {self.what}{state}>"


_live_cgroups: "weakref.WeakSet[Cgroup]" = weakref.WeakSet()
_live_watches: "weakref.WeakSet[Watch]" = weakref.WeakSet()


def _forget_inherited() -> None:
    """In a forked child, as for channels: no call on inherited handles
    (their lock may have been held by a thread that is not there), so they
    are dropped, closed, without a free."""
    for w in list(_live_watches):
        st = w._st
        st.lock = threading.Lock()
        st.p, st.closed, st.loop, st.waiters, st.users = None, True, None, [], 0
    for cg in list(_live_cgroups):
        p, cg._p = cg._p, None
        if p is not None:
            ffi.gc(p, None)
    _live_watches.clear()
    _live_cgroups.clear()


os.register_at_fork(after_in_child=_forget_inherited)


def _uint(name: str, value: int, bits: int = 64) -> int:
    value = operator.index(value)
    if not 0 <= value < 1 << bits:
        raise _CgroupInvalidError(_errno.EINVAL, f"{name}={value}: {strerror(-_errno.EINVAL)}")
    return value


def threshold(cg: Cgroup, bytes: int) -> Watch:
    """Each crossing of `bytes` by the cgroup's memory usage, up or down
    (cgroup v1 memory.usage_in_bytes, kubelet's eviction notifier): THRESHOLD
    events with the crossings since the last one and the usage just after."""
    b = _uint("bytes", bytes)
    p = cg._handle()
    return Watch(f"memory threshold {b}", lambda out: lib.eventq_memcg_watch_threshold(p, b, out))


def oom(cg: Cgroup) -> Watch:
    """Each time the cgroup hits its limit (cgroup v1 memory.oom_control):
    OOM events with the count, under_oom and oom_kill."""
    p = cg._handle()
    return Watch("OOM notifier", lambda out: lib.eventq_memcg_watch_oom(p, out))


def pressure_level(cg: Cgroup, level: Level = Level.CRITICAL, mode: Mode = Mode.DEFAULT) -> Watch:
    """memory.pressure_level notifications for `level` in `mode` (cgroup v1):
    PRESSURE events with the count. They come in floods under reclaim."""
    lv, md = _uint("level", level, 32), _uint("mode", mode, 32)
    p = cg._handle()
    name = Level(lv).name.lower() if lv in set(Level) else str(lv)
    return Watch(
        f"memory.pressure_level {name}",
        lambda out: lib.eventq_memcg_watch_pressure_level(p, lv, md, out),
    )


def psi(cg: Optional[Cgroup], stall_us: int, window_us: int = 2_000_000, *, full: bool = False) -> Watch:
    """A PSI trigger: memory stalls of at least `stall_us` within any
    `window_us` (500000..10000000; a multiple of 2 s without
    CAP_SYS_RESOURCE), on the cgroup's cgroup2 memory.pressure or
    system-wide (/proc/pressure/memory) when cg is None. "some" (a task
    stalled) unless `full` (all non-idle tasks at once). One PSI event per
    firing, at most one per window."""
    stall, window = _uint("stall_us", stall_us), _uint("window_us", window_us)
    kind = lib.EVENTQ_MEMCG_PSI_FULL if full else lib.EVENTQ_MEMCG_PSI_SOME
    p = ffi.NULL if cg is None else cg._handle()
    where = "system-wide" if cg is None else (cg.v2_dir or "cgroup")
    return Watch(
        f"PSI trigger {'full' if full else 'some'} {stall} {window} ({where})",
        lambda out: lib.eventq_memcg_watch_psi(p, kind, stall, window, out),
    )


def events(cg: Cgroup, file: Optional[str] = None) -> Watch:
    """Changes of a flat-keyed cgroup2 file's counters: memory.events (low,
    high, max, oom, oom_kill, ...) by default, or `file`
    (memory.events.local, memory.swap.events, cgroup.events): CHANGED
    events with the counters that changed."""
    p = cg._handle()
    if file is None:
        return Watch("memory.events", lambda out: lib.eventq_memcg_watch_events(p, out))
    c_file = ffi.new("char[]", file.encode())
    return Watch(file, lambda out: lib.eventq_memcg_watch_counters(p, c_file, out))
