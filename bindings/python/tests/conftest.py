# SPDX-License-Identifier: MIT OR Apache-2.0
"""Shared fixtures: the C helper (tests/helper.c) built against the installed
library, the message encoding it uses, and a watchdog-friendly asyncio runner.

The tests import the *installed* eventq package (run pytest from outside
bindings/python, as `make test-python` does); the library is the one the
package finds (EVENTQ_LIBRARY in `make test-python`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import cffi
import pytest

import eventq

HERE = Path(__file__).resolve().parent
LIBDIR = str(Path(eventq.library_path).resolve().parent) if os.sep in eventq.library_path else None

HELPER_CDEF = """
size_t eqtest_encode(uint32_t id, uint64_t seq, uint8_t *buf);
void *eqtest_producers_start(uintptr_t chan, int n, uint64_t per_thread, size_t batch, int close_at_end);
int eqtest_producers_join(void *handle);
int eqtest_recv_announce(uintptr_t chan, int *flag, void *buf, size_t cap, size_t *len);
"""


def pytest_report_header(config: Any) -> list[str]:
    return [
        f"eventq package: {os.path.dirname(eventq.__file__)}",
        f"libeventq: {eventq.library_path} ({eventq.library_version})",
    ]


def c_flags() -> tuple[list[str], list[str]]:
    """cc flags to build against the library the package loaded."""
    pc = shutil.which(os.environ.get("PKG_CONFIG", "pkg-config"))
    if pc:
        cflags = subprocess.run([pc, "--cflags", "eventq"], capture_output=True, text=True)
        libs = subprocess.run([pc, "--libs", "eventq"], capture_output=True, text=True)
        libdir = subprocess.run([pc, "--variable=libdir", "eventq"], capture_output=True, text=True)
        if cflags.returncode == 0 and libs.returncode == 0:
            rpath = [f"-Wl,-rpath,{libdir.stdout.strip()}"] if libdir.stdout.strip() else []
            return shlex.split(cflags.stdout), shlex.split(libs.stdout) + rpath
    if LIBDIR is None:
        pytest.fail("cannot build the C helper: pkg-config does not know eventq and EVENTQ_LIBRARY is not a path")
    prefix = os.path.dirname(LIBDIR)
    return [f"-I{prefix}/include"], [f"-L{LIBDIR}", "-leventq", f"-Wl,-rpath,{LIBDIR}"]


def compile_c(src: Path, out: Path, *, shared: bool) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} is missing: the tests build a C helper (install a C compiler)")
    cflags, libs = c_flags()
    cmd = [cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]
    if shared:
        cmd += ["-shared", "-fPIC"]
    cmd += cflags + [str(src), "-o", str(out)] + libs
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed:\n{res.stderr}")
    return out


@pytest.fixture(scope="session")
def helper(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The C helper library, loaded with cffi: (ffi, lib)."""
    so = compile_c(HERE / "helper.c", tmp_path_factory.mktemp("helper") / "libeqtest.so", shared=True)
    ffi = cffi.FFI()
    ffi.cdef(HELPER_CDEF)
    return ffi, ffi.dlopen(str(so))


HEADER = struct.Struct("<IQ")


def encode(pid: int, seq: int) -> bytes:
    """A message as tests/helper.c's eqtest_encode makes it."""
    return HEADER.pack(pid, seq) + bytes([(pid * 31 + seq) & 0xFF]) * (seq % 29)


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for c in data:
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def encode_checked(pid: int, seq: int) -> bytes:
    """A message as tests/cross/producer (the Go binding's C test helper,
    eqt_make) makes it: the same header, a payload of (seq*13 + pid*7) % 53
    bytes, and the FNV-1a hash of all that."""
    n = (seq * 13 + pid * 7) % 53
    body = HEADER.pack(pid, seq) + bytes((pid * 31 + seq * 7 + i) & 0xFF for i in range(n))
    return body + struct.pack("<I", fnv1a(body))


class Checker:
    """Checks a stream of encoded messages (`encode`, or another encoder):
    each whole (D2), once (D1), and in its producer's order (D3);
    `complete()` says whether all arrived."""

    def __init__(self, producers: int, per_producer: int, encoder: Any = encode) -> None:
        self.next = [0] * producers
        self.per_producer = per_producer
        self.count = 0
        self.encoder = encoder

    def check(self, m: bytes) -> None:
        pid, seq = HEADER.unpack_from(m)
        assert 0 <= pid < len(self.next), f"unknown producer {pid}"
        assert seq == self.next[pid], f"producer {pid}: got {seq}, expected {self.next[pid]} (lost or reordered)"
        assert m == self.encoder(pid, seq), f"producer {pid} seq {seq}: not whole"
        self.next[pid] += 1
        self.count += 1

    def complete(self) -> bool:
        return all(n == self.per_producer for n in self.next)


@pytest.fixture
def checker() -> type[Checker]:
    return Checker


def run_python(code: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter (same venv), from outside the source tree."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env if env is not None else os.environ.copy(),
        cwd="/",
        timeout=60,
        **kw,
    )
