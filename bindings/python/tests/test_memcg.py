# SPDX-License-Identifier: MIT OR Apache-2.0
"""eventq.memcg and python -m eventq.memwatch.

- Errors: what is missing, with its exception and errno (no such cgroup,
  the other cgroup version's interface, bad PSI triggers, a PSI window that
  needs CAP_SYS_RESOURCE, a closed Cgroup).
- The real test, where the cgroup v1 memory controller is writable (as
  tests/c/test_memcg.c and bindings/go/memcg_test.go decide): a child
  process moved into a new child cgroup (40 MiB limit, OOM killer off)
  allocates on command: one threshold crossing up, one OOM with under_oom,
  pressure, one crossing down once it is killed, one REMOVED per watch when
  the cgroup is removed, after which each async iteration ends. Where
  cgroup2 is mounted and writable, a PSI trigger and cgroup.events too.
- memwatch on a real cgroup: a process allocating past the threshold gives
  the crossing up and down lines; rmdir ends the program.
- Without a loop or a thread of the library's: next() in threads, close()
  waking threads and coroutines that wait (WatchClosedError) with every fd
  freed, next_async() cancelled losing nothing, timeouts, a PSI trigger
  that cannot fire reporting nothing while another on the same cgroup
  file fires (the kernel wakes both), read() with a poll's flags.

Parts this machine cannot run are skipped with the reason. No sleeps: the
child answers through a pipe and kernel notifications are awaited; the
watchdog is the only timer. Child cgroups are removed also on failure.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import itertools
import os
import select
import signal
import threading
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import eventq
from eventq import memcg
from eventq.memcg import Kind, Level

MIB = 1 << 20
_seq = itertools.count()

HOG = r"""
import mmap, sys
held = []
print("HOG ready", flush=True)
for line in sys.stdin:
    want = int(line.split()[1])
    while len(held) < want:
        m = mmap.mmap(-1, 1 << 20)
        for i in range(0, 1 << 20, 4096):
            m[i] = 1
        held.append(m)
    print("HOG at", len(held), flush=True)
"""


def own_dirs() -> tuple[str | None, str | None]:
    try:
        with memcg.Cgroup.own() as cg:
            return cg.v1_dir, cg.v2_dir
    except memcg.CgroupError as e:
        pytest.skip(f"no memory cgroup: {e}")


def has_cap_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool((int(line.split()[1], 16) >> 24) & 1)
    return False


@pytest.fixture
def child_cgroups() -> Iterator[Callable[[str], str]]:
    """make(parent) creates a uniquely named child cgroup, removed at the end
    if still there (skips the test if it cannot be made)."""
    made: list[str] = []

    def make(parent: str) -> str:
        d = os.path.join(parent, f"eventq-test-{os.getpid()}-py{next(_seq)}")
        try:
            os.mkdir(d)
        except OSError as e:
            pytest.skip(f"cannot create a child cgroup in {parent}: {e} (needs root or a delegated cgroup)")
        made.append(d)
        return d

    yield make
    for d in reversed(made):
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass


def test_errors_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(memcg.CgroupNotFoundError) as ei:
        memcg.Cgroup("/nonexistent/eventq")
    e = ei.value
    assert isinstance(e, FileNotFoundError) and isinstance(e, eventq.Error) and e.errno == errno.ENOENT
    assert "no such cgroup" in str(e) and "/nonexistent/eventq" in str(e)
    for not_a_cgroup in (str(tmp_path), "/proc/self/status", b"/nonexistent"):
        with pytest.raises(memcg.CgroupNotFoundError):
            memcg.Cgroup(not_a_cgroup)
    with pytest.raises(TypeError):
        memcg.Cgroup(42)  # type: ignore[arg-type]

    # Bad PSI triggers: window outside 500 ms..10 s, stall 0 or longer than
    # the window, negative values.
    for stall, window in ((100_000, 400_000), (100_000, 12_000_000), (0, 2_000_000), (3_000_000, 2_000_000), (-1, 2_000_000)):
        with pytest.raises(eventq.InvalidArgumentError) as ei2:
            memcg.psi(None, stall, window, full=stall == 0)
        assert isinstance(ei2.value, ValueError) and isinstance(ei2.value, memcg.CgroupError)
        assert ei2.value.errno == errno.EINVAL

    if not os.path.exists("/proc/pressure/memory"):
        with pytest.raises(memcg.CgroupError) as ei3:
            memcg.psi(None, 100_000)
        assert ei3.value.errno == errno.EOPNOTSUPP
    elif not has_cap_sys_resource():
        with pytest.raises(memcg.CgroupPermissionError) as ei4:
            memcg.psi(None, 100_000, 1_000_000)  # not a multiple of 2 s
        assert isinstance(ei4.value, PermissionError) and ei4.value.errno == errno.EPERM
        assert "CAP_SYS_RESOURCE" in str(ei4.value)

    # eventq_strerror has the memcg meaning of the codes these calls return.
    assert "no such cgroup" in eventq.strerror(-errno.ENOENT)
    assert "memory controller or interface not available" in eventq.strerror(-errno.ENODEV)
    assert "no PSI" in eventq.strerror(-errno.EOPNOTSUPP)


def test_own_cgroup_and_the_other_versions_interfaces() -> None:
    v1, v2 = own_dirs()
    proc = Path("/proc/self/cgroup").read_text()
    if v1 is not None:
        rel = next(line.split(":", 2)[2] for line in proc.splitlines() if line.split(":")[1] == "memory")
        assert v1.endswith(rel.rstrip("/")) and os.path.isdir(v1)
        with memcg.Cgroup(v1) as cg:
            assert cg.v1_dir == v1 and cg.v2_dir is None and "v1=" in repr(cg)
            for make in (lambda: memcg.psi(cg, 100_000), lambda: memcg.events(cg)):
                with pytest.raises(memcg.CgroupError) as ei:
                    make()
                assert ei.value.errno == errno.ENODEV
                assert "memory controller or interface not available" in str(ei.value)
            with pytest.raises(eventq.InvalidArgumentError):
                memcg.events(cg, "a/b")
            with pytest.raises(eventq.InvalidArgumentError):
                memcg.pressure_level(cg, 7)  # type: ignore[arg-type]
            with pytest.raises(eventq.InvalidArgumentError):
                memcg.pressure_level(cg, Level.LOW, 2**40)  # type: ignore[arg-type]
            with pytest.raises(eventq.InvalidArgumentError):
                memcg.threshold(cg, -1)
    if v2 is not None:
        with memcg.Cgroup(v2) as cg:
            assert cg.v2_dir == v2 and cg.v1_dir is None
            for make in (lambda: memcg.threshold(cg, MIB), lambda: memcg.oom(cg), lambda: memcg.pressure_level(cg)):
                with pytest.raises(memcg.CgroupError) as ei:
                    make()
                assert ei.value.errno == errno.ENODEV
        cg.close()
        cg.close()  # again: nothing
        with pytest.raises(ValueError, match="closed"):
            memcg.oom(cg)


def test_system_wide_psi_trigger() -> None:
    if not os.path.exists("/proc/pressure/memory"):
        pytest.skip("this kernel has no PSI (/proc/pressure/memory)")
    with memcg.psi(None, 150_000) as w:
        assert w.fileno() >= 0 and "system-wide" in repr(w)
        assert w.poll() == [] or all(ev.kind == Kind.PSI for ev in w.poll())
    with pytest.raises(ValueError, match="closed"):
        w.poll()
    assert list(w) == []  # a closed watch ends at once
    with pytest.raises(memcg.WatchClosedError) as ei:
        w.next()
    assert ei.value.errno == errno.EBADF and isinstance(ei.value, ValueError)

    # A full stall of 10 s in a 10 s window: nothing here comes near it.
    with memcg.psi(None, 10_000_000, 10_000_000, full=True) as w:
        assert w.read() is None and w.poll() == []
        with pytest.raises(eventq.WouldBlockError):
            w.next(timeout=0)
        with pytest.raises(eventq.TimeoutError):
            w.next(timeout=0.01)
        with pytest.raises(eventq.InvalidArgumentError):
            w.next(timeout=-1)
        # POLLIN from a poll of the fd is the firing that poll took.
        ev = w.read(select.POLLIN)
        assert ev is not None and ev.kind == Kind.PSI and ev.count == 1 and ev.psi_full
        assert (ev.psi_stall_us, ev.psi_window_us) == (10_000_000, 10_000_000)
        assert ev.spec == "/proc/pressure/memory:full 10000000 10000000"
        assert w.read() is None


class Recorder:
    """Collects the events of several watches from their async iterators."""

    def __init__(self) -> None:
        self.events: list[tuple[str, memcg.MemoryEvent]] = []
        self.changed = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.names: list[str] = []

    def watch(self, name: str, w: memcg.Watch) -> None:
        self.names.append(name)
        async def pump() -> None:
            async with w:
                async for ev in w:
                    assert ev.spec
                    self.events.append((name, ev))
                    self.changed.set()

        self.tasks.append(asyncio.ensure_future(pump()))

    def of(self, name: str, kind: Kind) -> list[memcg.MemoryEvent]:
        return [ev for n, ev in self.events if n == name and ev.kind == kind]

    async def until(self, what: Callable[[], bool]) -> None:
        while not what():
            self.changed.clear()
            await self.changed.wait()


def write(d: str, name: str, value: str) -> None:
    with open(os.path.join(d, name), "w") as f:
        f.write(value)


def test_real_cgroup(child_cgroups: Callable[[str], str]) -> None:
    v1, v2 = own_dirs()
    if v1 is None:
        pytest.skip("the cgroup v1 memory controller is not mounted")
    d = child_cgroups(v1)
    write(d, "memory.limit_in_bytes", str(40 * MIB))
    write(d, "memory.oom_control", "1")  # the child then waits in the OOM handling
    d2 = None
    if v2 is not None:
        try:
            d2 = child_cgroups(v2)
        except pytest.skip.Exception:
            d2 = None

    async def scenario() -> str:
        rec = Recorder()
        with memcg.Cgroup(d) as cg:
            rec.watch("threshold", memcg.threshold(cg, 16 * MIB))
            rec.watch("oom", memcg.oom(cg))
            rec.watch("pressure", memcg.pressure_level(cg, Level.LOW))
        psi = False
        if d2 is not None:
            with memcg.Cgroup(d2) as cg2:
                try:
                    rec.watch("psi", memcg.psi(cg2, 1, 2_000_000))
                    # Cannot fire here, but the kernel wakes its pollers when
                    # the other one does: it must report nothing.
                    rec.watch("psi-idle", memcg.psi(cg2, 10_000_000, 10_000_000, full=True))
                    psi = True
                except memcg.CgroupError as e:
                    print(f"PSI part skipped: {e}")
                rec.watch("cgroup.events", memcg.events(cg2, "cgroup.events"))
                try:
                    rec.watch("memory.events", memcg.events(cg2))
                except memcg.CgroupError as e:
                    assert e.errno == errno.ENODEV and not os.path.exists(os.path.join(d2, "memory.events"))
        hog = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOG, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert hog.stdin is not None and hog.stdout is not None
        try:
            line = (await hog.stdout.readline()).decode()
            assert line == "HOG ready\n", line
            write(d, "cgroup.procs", str(hog.pid))
            if d2 is not None:
                write(d2, "cgroup.procs", str(hog.pid))

            def populated() -> int:
                return sum(dl.delta for ev in rec.of("cgroup.events", Kind.CHANGED) for dl in ev.deltas if dl.name == "populated")

            # 1. 24 MiB: one crossing of 16 MiB, counted once.
            hog.stdin.write(b"alloc 24\n")
            assert (await hog.stdout.readline()).decode() == "HOG at 24\n"
            await rec.until(lambda: len(rec.of("threshold", Kind.THRESHOLD)) >= 1)
            [up] = rec.of("threshold", Kind.THRESHOLD)
            assert up.count == 1 and up.threshold == 16 * MIB and up.usage >= 16 * MIB
            assert rec.of("oom", Kind.OOM) == []
            if d2 is not None:
                await rec.until(lambda: populated() == 1)

            # 2. Into the limit: it sleeps in the kernel's OOM handling.
            hog.stdin.write(b"alloc 64\n")
            await rec.until(lambda: len(rec.of("oom", Kind.OOM)) >= 1 and len(rec.of("pressure", Kind.PRESSURE)) >= 1)
            [o] = rec.of("oom", Kind.OOM)
            assert o.count == 1 and o.under_oom
            assert "under_oom 1" in Path(d, "memory.oom_control").read_text()
            p = rec.of("pressure", Kind.PRESSURE)[0]
            assert p.count >= 1 and p.level == Level.LOW and p.mode == memcg.Mode.DEFAULT
            if psi:
                await rec.until(lambda: len(rec.of("psi", Kind.PSI)) >= 1)  # the next 2 s aggregation
                ev = rec.of("psi", Kind.PSI)[0]
                assert ev.count == 1 and not ev.psi_full and (ev.psi_stall_us, ev.psi_window_us) == (1, 2_000_000)

            # 3. Killed: its memory is freed, one crossing down.
            hog.kill()
            await hog.wait()
            await rec.until(lambda: len(rec.of("threshold", Kind.THRESHOLD)) >= 2)
            crossings = rec.of("threshold", Kind.THRESHOLD)
            assert sum(ev.count for ev in crossings) == 2 and crossings[-1].usage < 16 * MIB
            if d2 is not None:
                await rec.until(lambda: populated() == 0)
        finally:
            if hog.returncode is None:
                hog.kill()
                await hog.wait()

        # 4. Removal: each watch reports it once, and its iteration ends.
        os.rmdir(d)
        if d2 is not None:
            os.rmdir(d2)
        await asyncio.gather(*rec.tasks)
        removed = sorted(n for n, ev in rec.events if ev.kind == Kind.REMOVED)
        assert removed == sorted(rec.names)  # each watch once
        assert len(rec.of("oom", Kind.OOM)) == 1
        if psi:
            assert [ev.kind for n, ev in rec.events if n == "psi-idle"] == [Kind.REMOVED]
        return f"{len(rec.events)} events"

    print(asyncio.run(scenario()))


def test_blocking_iteration_and_removal(child_cgroups: Callable[[str], str]) -> None:
    _, v2 = own_dirs()
    if v2 is None:
        pytest.skip("cgroup2 is not mounted")
    d = child_cgroups(v2)
    with memcg.Cgroup(d) as cg:
        w = memcg.events(cg, "cgroup.events")
    with w:
        assert w.poll() == []  # nothing changed yet
        os.rmdir(d)
        ev = next(w)  # blocks in poll() until the removal
        assert ev.kind == Kind.REMOVED and "cgroup.events" in ev.spec
        assert list(w) == []  # ended
    with pytest.raises(StopIteration):
        next(w)


def run_memwatch(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "eventq.memwatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        **kw,
    )


def test_memwatch_usage_errors() -> None:
    """argparse's messages and exit status 2 for bad arguments; 1 when no
    watch can be set up."""
    for args, code, texts in (
        ((), 2, ("usage: python -m eventq.memwatch", "the following arguments are required: CGROUP_DIR, BYTES")),
        (("/x", "many"), 2, ("usage:", "argument BYTES: not a number: 'many'")),
        (("/x", "1", "soon"), 2, ("argument STALL_US: not a number: 'soon'",)),
        (("/x", "-5"), 2, ("argument BYTES: must not be negative: '-5'",)),
        (("/x", "1", "2", "3"), 2, ("unrecognized arguments: 3",)),
        (("/nonexistent/eventq", "1"), 1, ("no such cgroup",)),
    ):
        p = run_memwatch(*args)
        out, err = p.communicate(timeout=60)
        assert p.returncode == code and all(t in err for t in texts), (args, out, err)


def test_memwatch_help() -> None:
    """--help: the full text on stdout, exit status 0."""
    p = run_memwatch("--help")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and err == "", (out, err)
    assert out.startswith("usage: python -m eventq.memwatch [-h] CGROUP_DIR BYTES [STALL_US]"), out
    for text in ("CGROUP_DIR", "usage threshold in bytes", "default: 100000", "cgroup2", "Exit status"):
        assert text in out, (text, out)


def test_memwatch_on_a_real_cgroup(child_cgroups: Callable[[str], str]) -> None:
    v1, _ = own_dirs()
    if v1 is None:
        pytest.skip("the cgroup v1 memory controller is not mounted")
    d = child_cgroups(v1)
    w = run_memwatch(d, str(32 * MIB), "1000")
    try:
        assert w.stdout is not None
        header = w.stdout.readline()
        assert header.startswith(f"memwatch: {d} (cgroup v1): threshold {32 * MIB} bytes, OOM"), header
        # A process allocates 48 MiB in the cgroup, then exits: up, then down.
        subprocess.run(
            ["sh", "-c", f'echo $$ > {d}/cgroup.procs; exec "{sys.executable}" -c "b = bytes([1]) * (48 << 20)"'],
            check=True,
        )
        # Two crossings: up, then down when it exits (one line each, or one
        # line counting both if memwatch was slower than the process).
        crossings: list[str] = []
        counted = 0
        while counted < 2:
            line = w.stdout.readline()
            assert line, "memwatch exited"
            if " threshold " in line:
                crossings.append(line)
                counted += int(line.split(" crossed ")[1].split("x")[0])
        assert counted == 2 and "now below" in crossings[-1], crossings
        if len(crossings) == 2:
            assert "crossed 1x" in crossings[0] and "now above" in crossings[0], crossings
        stamp = crossings[0].split()[0]
        assert len(stamp) == 24 and stamp.endswith("Z") and stamp[10] == "T"
        os.rmdir(d)  # ends the program: one removal per cgroup watch
        out, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
        watches = 3 - ("memory.pressure_level" in err)  # it is optional there
        assert out.count("cgroup removed (") == watches, out
    finally:
        if w.returncode is None:
            w.kill()
            w.wait()


def test_memwatch_exits_on_sigterm(child_cgroups: Callable[[str], str]) -> None:
    _, v2 = own_dirs()
    v1, _ = own_dirs()
    parent = v2 or v1
    assert parent is not None
    d = child_cgroups(parent)
    w = run_memwatch(d, "1")
    assert w.stdout is not None
    assert w.stdout.readline().startswith(f"memwatch: {d} (cgroup")
    w.send_signal(signal.SIGTERM)
    out, err = w.communicate(timeout=60)
    assert w.returncode == 0, err
    assert out.rstrip().endswith("signal 15: exiting")


def test_forgotten_watches_stop_and_free_their_fds(child_cgroups: Callable[[str], str]) -> None:
    """A Watch dropped without close() frees its fds; one still alive at
    interpreter exit does not hold the exit up."""
    _, v2 = own_dirs()
    if v2 is None:
        pytest.skip("cgroup2 is not mounted")
    d = child_cgroups(v2)
    gc.collect()  # garbage of earlier tests holds fds too
    fds = len(os.listdir("/proc/self/fd"))
    with memcg.Cgroup(d) as cg:
        for _ in range(20):
            memcg.events(cg, "cgroup.events")  # dropped at once
    gc.collect()
    assert not [t for t in threading.enumerate() if t.name.startswith("eventq")]
    assert len(os.listdir("/proc/self/fd")) == fds
    code = f"from eventq import memcg\nw = memcg.events(memcg.Cgroup({d!r}), 'cgroup.events')\nprint('alive')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0 and r.stdout == "alive\n", r.stderr


def idle_watch(child_cgroups: Callable[[str], str]) -> tuple[memcg.Watch, str | None]:
    """A watch that reports nothing until the test acts: a new cgroup2
    child's cgroup.events (its directory returned), else a system-wide PSI
    trigger that cannot fire."""
    _, v2 = own_dirs()
    if v2 is not None:
        d = child_cgroups(v2)
        with memcg.Cgroup(d) as cg:
            return memcg.events(cg, "cgroup.events"), d
    if not os.path.exists("/proc/pressure/memory"):
        pytest.skip("no cgroup2 and no PSI: no idle watch")
    return memcg.psi(None, 10_000_000, 10_000_000, full=True), None


def test_next_in_a_thread_until_the_end(child_cgroups: Callable[[str], str]) -> None:
    """next() blocks a thread (not the library's: the caller's) until the
    event; REMOVED is the last, then WatchEndedError."""
    w, d = idle_watch(child_cgroups)
    if d is None:
        pytest.skip("cgroup2 is not mounted")
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(w.next()))
    t.start()
    os.rmdir(d)
    t.join()
    [ev] = got
    assert ev.kind == Kind.REMOVED and w.ended and "ended" in repr(w)
    with pytest.raises(memcg.WatchEndedError) as ei:
        w.next(timeout=0)
    assert ei.value.errno == errno.ENOENT and isinstance(ei.value, FileNotFoundError)
    w.close()


def test_close_wakes_every_waiter_and_frees_the_fds(child_cgroups: Callable[[str], str]) -> None:
    """close() from another thread wakes the threads in next() on one watch
    and the coroutines in next_async() on another with WatchClosedError; every
    fd of the watches (and of their waits) is freed once they are gone. A
    watch is waited on in threads or in one event loop, not both."""
    gc.collect()
    fds = len(os.listdir("/proc/self/fd"))
    in_threads, _ = idle_watch(child_cgroups)
    in_loop, _ = idle_watch(child_cgroups)
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def wait_in_thread() -> None:
        started.wait()
        try:
            in_threads.next()
        except BaseException as e:
            errors.append(e)

    async def wait_async() -> None:
        loop = asyncio.get_running_loop()
        tasks = [asyncio.ensure_future(in_loop.next_async()) for _ in range(2)]
        await asyncio.sleep(0)  # they register (no timing: one loop turn)
        with pytest.raises(RuntimeError, match="awaited in an event loop"):
            in_loop.next(timeout=0.01)
        await loop.run_in_executor(None, started.wait)
        for res in await asyncio.gather(*tasks, return_exceptions=True):
            errors.append(res)  # type: ignore[arg-type]

    threads = [threading.Thread(target=wait_in_thread) for _ in range(3)]
    for t in threads:
        t.start()
    closer = threading.Thread(target=lambda: (started.wait(), in_threads.close(), in_loop.close()))
    closer.start()
    asyncio.run(wait_async())
    for t in threads + [closer]:
        t.join()
    assert len(errors) == 5 and all(isinstance(e, memcg.WatchClosedError) for e in errors), errors
    for w in (in_threads, in_loop):
        assert list(w) == [] and "closed" in repr(w)
        with pytest.raises(memcg.WatchClosedError):
            w.fileno()
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds


def test_async_cancel_loses_nothing(child_cgroups: Callable[[str], str]) -> None:
    """A next_async() cancelled or timed out takes nothing: the next one
    gets the event."""
    w, d = idle_watch(child_cgroups)
    if d is None:
        pytest.skip("cgroup2 is not mounted")

    async def scenario() -> memcg.MemoryEvent:
        task = asyncio.ensure_future(w.next_async())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(eventq.TimeoutError):
            await w.next_async(timeout=0.01)
        with pytest.raises(eventq.WouldBlockError):
            await w.next_async(timeout=0)
        os.rmdir(d)
        return await w.next_async()

    with w:
        ev = asyncio.run(scenario())
        assert ev.kind == Kind.REMOVED
        with pytest.raises(memcg.WatchEndedError):
            asyncio.run(w.next_async())


def test_merge_as_the_kernel_merges() -> None:
    """Events the asyncio reader read and no one took yet merge: counts add
    up, counter deltas add up, a counter back where it was drops out."""
    a = memcg.MemoryEvent(Kind.THRESHOLD, 1, "s", threshold=5, usage=9)
    b = memcg.MemoryEvent(Kind.THRESHOLD, 2, "s", threshold=5, usage=3)
    assert memcg._merge(a, b) == memcg.MemoryEvent(Kind.THRESHOLD, 3, "s", threshold=5, usage=3)
    p = memcg.MemoryEvent(Kind.PSI, 1, "s")
    assert memcg._merge(p, p) == p
    up = memcg.MemoryEvent(Kind.CHANGED, 0, "s", deltas=(memcg.Delta("populated", 1, 1), memcg.Delta("frozen", 1, 1)))
    down = memcg.MemoryEvent(Kind.CHANGED, 0, "s", deltas=(memcg.Delta("populated", 0, -1),))
    assert memcg._merge(up, down) == memcg.MemoryEvent(Kind.CHANGED, 0, "s", deltas=(memcg.Delta("frozen", 1, 1),))
    only = memcg.MemoryEvent(Kind.CHANGED, 0, "s", deltas=(memcg.Delta("populated", 1, 1),))
    assert memcg._merge(only, down) is None
