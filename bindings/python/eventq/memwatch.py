# SPDX-License-Identifier: MIT OR Apache-2.0
"""memwatch: a tiny kubelet eviction watcher on eventq.memcg, the Python twin
of examples-c/memwatch.c and bindings/go/cmd/memwatch.

    python -m eventq.memwatch CGROUP_DIR BYTES [STALL_US]

On a cgroup v1 memory directory it watches the usage threshold <bytes>,
OOM, memory.pressure_level "critical" and a system-wide PSI trigger; on a
cgroup2 directory, a PSI trigger on the cgroup's memory.pressure and its
memory.events counters (byte thresholds are a cgroup v1 interface). The PSI
trigger is "some <stall us> 2000000" (default stall 100000 us). Each event
is printed with a UTC timestamp and the kernel's count, so none is merged
away. It runs until SIGINT/SIGTERM, or until the cgroup is removed.

One asyncio task per watch (`async for ev in watch`), all on one event
loop: no thread and no libeventq loop.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import signal
import sys
from typing import Optional

from . import memcg
from .memcg import Kind, MemoryEvent


def stamp() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def mib(b: int) -> float:
    return b / (1 << 20)


def describe(ev: MemoryEvent) -> str:
    """One event as examples-c/memwatch.c prints it (without the stamp)."""
    if ev.kind == Kind.THRESHOLD:
        side = "above" if ev.usage >= ev.threshold else "below"
        return f"threshold {ev.threshold} crossed {ev.count}x: usage {mib(ev.usage):.1f} MiB, now {side}"
    if ev.kind == Kind.OOM:
        return f"OOM {ev.count}x: under_oom {int(ev.under_oom)}, oom_kill {ev.oom_kill}"
    if ev.kind == Kind.PRESSURE:
        level = ev.level.name.lower() if ev.level is not None else "?"
        return f"pressure {level} {ev.count}x"
    if ev.kind == Kind.PSI:
        kind = "full" if ev.psi_full else "some"
        return f"PSI {kind} {ev.psi_stall_us}us in {ev.psi_window_us}us window ({ev.spec})"
    if ev.kind == Kind.CHANGED:
        return "memory.events:" + "".join(f" {d.name} {d.delta:+d} ({d.value})" for d in ev.deltas)
    return f"cgroup removed ({ev.spec})"


def _warn(err: memcg.CgroupError) -> None:
    print(f"memwatch: {err.strerror} ({os.strerror(err.errno or 0)})", file=sys.stderr)


async def run(directory: str, nbytes: int, stall_us: int) -> int:
    """Watches until the cgroup is removed or a signal; the exit status."""
    try:
        cg = memcg.Cgroup(directory)
    except memcg.CgroupError as e:
        print(f"memwatch: {e.strerror}", file=sys.stderr)
        return 1
    # Signals first: once the header is printed, SIGINT/SIGTERM end it cleanly.
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):

        def on_signal(sig: int = sig) -> None:
            print(f"{stamp()} signal {sig}: exiting", flush=True)
            if not stop.done():
                stop.set_result(None)

        loop.add_signal_handler(sig, on_signal)
    ending: list[memcg.Watch] = []  # watches that end with a removal
    others: list[memcg.Watch] = []
    with cg:
        if cg.v1_dir is not None:
            try:
                ending.append(memcg.threshold(cg, nbytes))
                ending.append(memcg.oom(cg))
            except memcg.CgroupError as e:
                _warn(e)
                for w in ending:
                    w.close()
                return 1
            try:
                ending.append(memcg.pressure_level(cg, memcg.Level.CRITICAL))
            except memcg.CgroupError as e:
                _warn(e)
            # System-wide: a v1 cgroup has no PSI file of its own; it never
            # reports a removal, so it does not keep the program running.
            try:
                others.append(memcg.psi(None, stall_us))
            except memcg.CgroupError as e:
                _warn(e)
            print(
                f"memwatch: {directory} (cgroup v1): threshold {nbytes} bytes, OOM, "
                f"pressure critical, PSI some {stall_us}us/2s system-wide"
            )
        else:
            what = []
            try:
                ending.append(memcg.psi(cg, stall_us))
                what.append(f" PSI some {stall_us}us/2s")
            except memcg.CgroupError as e:
                _warn(e)
            try:
                ending.append(memcg.events(cg))
                what.append(" memory.events")
            except memcg.CgroupError as e:
                _warn(e)
            if not ending:
                return 1
            print(
                f"memwatch: {directory} (cgroup2):{''.join(what)} "
                f"(byte thresholds need cgroup v1: {nbytes} ignored)"
            )
    sys.stdout.flush()

    async def pump(w: memcg.Watch) -> None:
        async for ev in w:
            print(stamp(), describe(ev), flush=True)

    tasks = [asyncio.ensure_future(pump(w)) for w in ending + others]
    removed = asyncio.ensure_future(asyncio.gather(*tasks[: len(ending)]))
    try:
        await asyncio.wait([removed, stop], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks + [removed]:
            t.cancel()
        await asyncio.gather(*tasks, removed, return_exceptions=True)
        for w in ending + others:
            w.close()
    for t in tasks:  # a watch that failed (not cancelled) fails the program
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    return 0


def _number(text: str) -> int:
    """A non-negative integer: decimal, or 0x/0o/0b prefixed."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eventq.memwatch",
        description=(
            "A tiny kubelet eviction watcher: prints each memory-pressure event of a "
            "cgroup with a UTC timestamp and the kernel's count, until SIGINT/SIGTERM "
            "or until the cgroup is removed."
        ),
        epilog=(
            "cgroup v1 (a memory controller directory): the usage threshold BYTES, OOM, "
            'memory.pressure_level "critical" and a system-wide PSI trigger. cgroup2: a '
            "PSI trigger on the cgroup's memory.pressure and its memory.events counters "
            "(byte thresholds are a cgroup v1 interface: BYTES is then ignored). The PSI "
            'trigger is "some STALL_US 2000000". Exit status: 0 at a signal or once the '
            "cgroup is removed, 1 if no watch could be set up, 2 for bad arguments."
        ),
    )
    p.add_argument("cgroup_dir", metavar="CGROUP_DIR", help="the cgroup's directory, e.g. /sys/fs/cgroup/job")
    p.add_argument("nbytes", metavar="BYTES", type=_number, help="usage threshold in bytes (cgroup v1; 0x... accepted)")
    p.add_argument(
        "stall_us",
        metavar="STALL_US",
        type=_number,
        nargs="?",
        default=100000,
        help="PSI stall in microseconds per 2 s window (default: %(default)s)",
    )
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)  # exits 2 with argparse's message on bad arguments
    return asyncio.run(run(args.cgroup_dir, args.nbytes, args.stall_us))


if __name__ == "__main__":
    sys.exit(main())
