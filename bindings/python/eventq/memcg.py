# SPDX-License-Identifier: MIT OR Apache-2.0
"""Memory-pressure watches: cgroup v1 thresholds, OOM and pressure levels,
cgroup2 PSI triggers and memory.events, each an async (or blocking)
iterator of MemoryEvent, one per kernel wake-up with the kernel's count
(docs/memcg.md).

    cg = Cgroup.open("/sys/fs/cgroup/memory/job")
    async with memcg.threshold(cg, 512 << 20) as watch:
        async for ev in watch:          # ends after the REMOVED event
            print(ev.count, "crossing(s), usage now", ev.usage)

Each watch runs one source on a libeventq loop of its own, in a thread of
its own; events reach the iterator through a channel. Registration happens
when the watch is made, so a missing controller or permission is raised
there, as a CgroupError with the library's explanation (eventq_strerror).

The library makes a watch (an eventq_memcg_watch_* call) and adds it to a
loop (eventq_loop_add_memcg, which takes it over).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import errno as _errno
import operator
import os
import threading
import weakref
from typing import Any, Callable, Optional, Union

from ._chan import Chan
from ._errors import Error, InvalidArgument, WouldBlock, strerror
from ._ffi import ffi, lib

__all__ = [
    "Cgroup",
    "CgroupError",
    "CgroupNotFound",
    "CgroupPermissionError",
    "Kind",
    "Level",
    "Mode",
    "Delta",
    "MemoryEvent",
    "Watch",
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


class CgroupNotFound(CgroupError, FileNotFoundError):
    """ENOENT: the directory does not exist, is not a cgroup, or was removed."""


class CgroupPermissionError(CgroupError, PermissionError):
    """EACCES/EPERM: the cgroup's control file cannot be opened or written."""


class _CgroupInvalid(CgroupError, InvalidArgument):
    """EINVAL: a bad argument (a PSI window outside 500 ms..10 s, ...)."""


_CLASSES: dict[int, type[CgroupError]] = {
    _errno.ENOENT: CgroupNotFound,
    _errno.EACCES: CgroupPermissionError,
    _errno.EPERM: CgroupPermissionError,
    _errno.EINVAL: _CgroupInvalid,
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


class _Sink:
    """Where a watch's loop thread leaves events for the consumer: a deque,
    and a doorbell channel (capacity 1) holding a message while there may be
    events to take. The callback appends, then rings; the consumer takes
    the ring, then empties the deque, so no event is left unsignalled."""

    __slots__ = ("events", "bell", "failure", "lp")

    def __init__(self) -> None:
        self.events: collections.deque[MemoryEvent] = collections.deque()
        self.bell = Chan(1)
        self.failure: Optional[BaseException] = None
        self.lp: Any = None

    def ring(self) -> None:
        try:
            self.bell.send(b"", timeout=0)
        except WouldBlock:  # already rung, not yet taken
            pass


@ffi.callback("int(eventq_source *, const eventq_memcg_event *, void *)")
def _on_event(src: Any, ev: Any, userdata: Any) -> int:
    """The C callback of every watch (on its loop thread): copies the event out."""
    sink: _Sink = ffi.from_handle(userdata)
    try:
        event = _event_of(ev)
        sink.events.append(event)
        if event.kind == Kind.REMOVED:  # the source is disabled now: nothing more will come
            lib.eventq_loop_stop(sink.lp)
    except BaseException as e:  # kept for the iterator; C must not see it
        sink.failure = e
    sink.ring()
    return 0


def _run_loop(lp: Any, sink: _Sink, userdata: Any) -> None:
    """A watch's thread: the library's loop, until stopped. It holds the
    loop and the callbacks' userdata, so neither goes before it returns."""
    rc = lib.eventq_loop_run(lp)
    if rc < 0:
        sink.failure = _error(rc, "eventq_loop_run")
        sink.ring()


class Watch:
    """One memory source, as an iterator of MemoryEvent.

    `async for ev in watch` (or `for ev in watch`, blocking) yields each
    event until the cgroup is removed: the REMOVED event is the last. A
    system-wide PSI trigger never ends. One consumer at a time; close()
    (or `with`/`async with`) stops the source and frees its fds.

    The source runs on a libeventq loop of its own, in a thread of its own
    that blocks in the loop's epoll_wait; events reach the consumer through
    a channel. (Polling the loop's fd from asyncio instead would nest it
    in another epoll, and that outer poll consumes a PSI trigger's event
    before the loop can see it.)
    """

    def __init__(self, what: str, make: Callable[[Any], int]) -> None:
        """`make(out)` is an eventq_memcg_watch_* call writing to `out`."""
        self.what = what  #: what is watched, for messages
        self._ended = False
        self._thread: Optional[threading.Thread] = None
        self._loop: Any = None
        w = ffi.new("eventq_memcg_watch **")
        rc = make(w)
        if rc < 0:
            raise _error(rc, what)
        out = ffi.new("eventq_loop **")
        rc = lib.eventq_loop_new(out)
        if rc < 0:
            lib.eventq_memcg_watch_free(w[0])
            raise _error(rc, "eventq_loop_new")
        self._loop = ffi.gc(out[0], lib.eventq_loop_free)
        _live_watches.add(self)
        self._sink = sink = _Sink()
        sink.lp = out[0]
        self._userdata = ffi.new_handle(sink)
        # The loop takes the watch over, also if this fails.
        rc = lib.eventq_loop_add_memcg(self._loop, w[0], _on_event, self._userdata, ffi.NULL, ffi.NULL)
        if rc < 0:
            self._loop = None
            raise _error(rc, what)
        # The thread holds the loop, the sink and the userdata, never the
        # Watch, so a forgotten Watch is still collected (its __del__ stops it).
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop, sink, self._userdata), name=f"eventq memcg: {what}", daemon=True
        )
        self._thread.start()

    def fileno(self) -> int:
        """An fd readable while events may be waiting (then call poll())."""
        return self._sink.bell.fileno()

    def _next_ready(self) -> Optional[MemoryEvent]:
        """The next event already copied out, or None; StopIteration at the end."""
        sink = self._sink
        if sink.failure is not None:
            failure, sink.failure = sink.failure, None
            raise failure
        if sink.events:
            ev = sink.events.popleft()
            if ev.kind == Kind.REMOVED:
                self._ended = True
            return ev
        if self._ended or self._loop is None:
            raise StopIteration
        return None

    def poll(self) -> list[MemoryEvent]:
        """The events that are ready now, without waiting."""
        if self._loop is None:
            raise ValueError(f"{self.what}: the watch is closed")
        try:
            self._sink.bell.recv(timeout=0)
        except WouldBlock:
            pass
        out = []
        try:
            while (ev := self._next_ready()) is not None:
                out.append(ev)
        except StopIteration:
            pass
        return out

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> MemoryEvent:
        """The next event, waiting for it (in the main thread Ctrl-C interrupts)."""
        while True:
            ev = self._next_ready()
            if ev is not None:
                return ev
            self._sink.bell.recv()

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> MemoryEvent:
        """The next event, waiting for it in the running asyncio loop."""
        while True:
            try:
                ev = self._next_ready()
            except StopIteration:
                raise StopAsyncIteration from None
            if ev is not None:
                return ev
            await self._sink.bell.recv_async()

    def close(self) -> None:
        """Stops the source and its thread and frees its loop; iteration then
        ends (events already delivered are still returned). Idempotent."""
        self._close(join=True)

    def _close(self, join: bool) -> None:
        lp, self._loop = self._loop, None
        if lp is None:
            return
        if self._thread is not None:
            lib.eventq_loop_stop(lp)
            if join:
                self._thread.join()
        # Freed with the last reference: here after the join, else when the
        # thread (whose arguments hold the loop too) has returned.
        del lp
        self._userdata = None
        self._sink.ring()  # wakes a consumer waiting on the bell

    def __del__(self) -> None:
        # No join here: at interpreter exit the thread may never run again.
        try:
            self._close(join=False)
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
        return f"<eventq.memcg.Watch {self.what}{' closed' if self._loop is None else ''}>"


_live_cgroups: "weakref.WeakSet[Cgroup]" = weakref.WeakSet()
_live_watches: "weakref.WeakSet[Watch]" = weakref.WeakSet()


def _forget_inherited() -> None:
    """In a forked child, as for channels: no call on inherited handles (the
    watch threads are not there), so they are dropped without a free."""
    for w in list(_live_watches):
        lp, w._loop, w._thread = w._loop, None, None
        if lp is not None:
            ffi.gc(lp, None)
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
        raise _CgroupInvalid(_errno.EINVAL, f"{name}={value}: {strerror(-_errno.EINVAL)}")
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
