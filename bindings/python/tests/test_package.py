# SPDX-License-Identifier: MIT OR Apache-2.0
"""The package's surface: exception names and their 0.2 aliases, what an
import costs in modules, the examples, the version."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import eventq
from eventq import memcg
from conftest import run_python

PY_DIR = Path(__file__).resolve().parents[1]

# The names of 0.2 and the classes they stay for (0.x).
ALIASES = {
    "Closed": "ClosedError",
    "Timeout": "TimeoutError",
    "WouldBlock": "WouldBlockError",
    "InvalidArgument": "InvalidArgumentError",
    "MessageTooLarge": "MessageTooLargeError",
    "WrongSide": "WrongSideError",
    "BrokenProtocol": "BrokenProtocolError",
    "Attached": "AttachedError",
}
MEMCG_ALIASES = {
    "CgroupNotFound": "CgroupNotFoundError",
    "WatchClosed": "WatchClosedError",
    "WatchEnded": "WatchEndedError",
}


def public_exceptions(module: object) -> dict[str, type]:
    return {
        n: v
        for n in getattr(module, "__all__")
        if isinstance(v := getattr(module, n), type) and issubclass(v, BaseException)
    }


def test_exception_names_end_in_error() -> None:
    for module in (eventq, memcg):
        names = public_exceptions(module)
        assert names, module
        assert [n for n in names if not n.endswith("Error")] == [], module


@pytest.mark.parametrize(("module", "aliases"), [(eventq, ALIASES), (memcg, MEMCG_ALIASES)])
def test_old_names_are_the_same_classes(module: object, aliases: dict[str, str]) -> None:
    for old, new in aliases.items():
        assert getattr(module, old) is getattr(module, new), old
        assert old not in getattr(module, "__all__"), old  # kept, not advertised


def test_exceptions_show_as_eventq() -> None:
    """__module__ is eventq, so a traceback reads eventq.ClosedError."""
    for name, cls in [*public_exceptions(eventq).items(), ("TimeoutError", eventq.TimeoutError)]:
        assert cls.__module__ == "eventq" and cls.__qualname__ == name, cls
    ch = eventq.Chan()
    ch.close()
    try:
        ch.send(b"late")
    except eventq.ClosedError as e:
        text = "".join(traceback.format_exception_only(type(e), e))
    finally:
        ch.release()
    assert text.startswith("eventq.ClosedError: "), text
    for cls in public_exceptions(memcg).values():
        assert cls.__module__ == "eventq.memcg", cls


def test_old_names_still_catch() -> None:
    ch = eventq.Chan()
    try:
        with pytest.raises(eventq.WouldBlock):
            ch.recv(timeout=0)
        with pytest.raises(eventq.Timeout) as ei:
            ch.recv(timeout=0.001)
        assert type(ei.value) is eventq.TimeoutError and isinstance(ei.value, TimeoutError)
    finally:
        ch.release()


def test_exceptions_pickle_under_their_names() -> None:
    for cls in (eventq.ClosedError, eventq.WouldBlockError, eventq.TimeoutError):
        e = pickle.loads(pickle.dumps(cls(5, "text")))
        assert type(e) is cls and e.errno == 5 and e.strerror == "text"
    e = pickle.loads(pickle.dumps(eventq.MessageTooLargeError(99)))
    assert type(e) is eventq.MessageTooLargeError and e.needed == 99


def test_star_import_keeps_the_builtin_timeout_error() -> None:
    """eventq.TimeoutError is narrower than the builtin: `from eventq import *`
    must not shadow it."""
    ns: dict[str, object] = {}
    exec("from eventq import *", ns)
    assert "TimeoutError" not in ns and "ClosedError" in ns


def test_import_is_lazy() -> None:
    """A thread user imports neither asyncio nor cffi's parser; the first
    coroutine imports asyncio."""
    code = (
        "import sys, eventq\n"
        "lazy = ('asyncio', 'pycparser', 'cffi.api', 'subprocess', 'dataclasses')\n"
        "print(sorted(m for m in lazy if m in sys.modules))\n"
        "import asyncio\n"
        "ch = eventq.Chan(); ch.send(b'x')\n"
        "print(asyncio.run(ch.recv_async()))\n"
    )
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    loaded, got = r.stdout.splitlines()
    want: list[str] = [] if _prebuilt() else ["cffi.api", "pycparser"]
    assert loaded == repr(want), loaded
    assert got == "b'x'"


def _prebuilt() -> bool:
    """Whether the package uses the declarations parsed at build time."""
    ffi_mod = sys.modules["eventq._ffi"]
    return "eventq._abi" in sys.modules and ffi_mod.ffi is sys.modules["eventq._abi"].ffi


def test_built_package_uses_the_parsed_declarations() -> None:
    if not (Path(eventq.__file__).parent / "_abi.py").exists():
        pytest.skip("eventq/_abi.py is made by a build (setup.py): this is a source tree")
    assert _prebuilt()


def test_stale_parsed_declarations_are_not_used(tmp_path: Path) -> None:
    """An _abi.py made from other declarations is ignored (parsed again)."""
    pkg = Path(eventq.__file__).parent
    if not (pkg / "_abi.py").exists():
        pytest.skip("no eventq/_abi.py: this is a source tree")
    shutil.copytree(pkg, tmp_path / "eventq", ignore=shutil.ignore_patterns("__pycache__"))
    abi = tmp_path / "eventq" / "_abi.py"
    abi.write_text(re.sub(r"CDEF_CRC32 = \d+", "CDEF_CRC32 = 1", abi.read_text()))
    r = run_python("import sys, eventq; print('pycparser' in sys.modules)", env=_env(PYTHONPATH=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def _env(**changes: str) -> dict[str, str]:
    e = dict(os.environ)
    e.update(changes)
    return e


def test_stats_made_on_first_use_has_the_struct_s_fields() -> None:
    import dataclasses

    from eventq import Stats  # through the module's __getattr__

    chan_module = sys.modules["eventq._chan"]
    assert tuple(f.name for f in dataclasses.fields(Stats)) == chan_module._STATS_FIELDS
    assert set(chan_module._STATS_FIELDS) == {n for n, _ in chan_module.ffi.typeof("eventq_chan_stats").fields}
    assert Stats is eventq.Stats and Stats.__module__ == "eventq"
    ch = eventq.Chan()
    ch.send(b"x")
    st = ch.stats()
    assert isinstance(st, Stats) and (st.sent, st.pending, st.closed) == (1, 1, False)
    assert pickle.loads(pickle.dumps(st)) == st
    ch.release()
    final = ch.final_stats
    assert isinstance(final, Stats) and (final.sent, final.dropped) == (1, 1), final


def test_version_is_the_project_s() -> None:
    text = (PY_DIR / "pyproject.toml").read_text()
    m = re.search(r'^version = "([^"]+)"', text, flags=re.M)
    assert m and eventq.__version__ == m[1]


@pytest.mark.parametrize("example", sorted(p.name for p in (PY_DIR / "examples").glob("*.py")))
def test_example_runs(example: str) -> None:
    r = subprocess.run(
        [sys.executable, str(PY_DIR / "examples" / example), "2000"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "each once" in r.stdout, r.stdout
