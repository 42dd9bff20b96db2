# SPDX-License-Identifier: MIT OR Apache-2.0
"""How the package finds libeventq (EVENTQ_LIBRARY, the bundled copy,
EVENTQ_USE_SYSTEM_LIBRARY, pkg-config, the dynamic loader) and the
ImportError when it cannot: each in a fresh interpreter with a controlled
environment."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import sys
from pathlib import Path

import pytest

import eventq
from conftest import compile_c, run_python

LIB = Path(eventq.library_path).resolve()
PREFIX_LIB = LIB.parent
SHOW = "import eventq; print(eventq.library_path); print(eventq.library_version)"


def env(**changes: str | None) -> dict[str, str]:
    e = {
        k: v
        for k, v in os.environ.items()
        if k not in ("EVENTQ_LIBRARY", "LD_LIBRARY_PATH", "EVENTQ_USE_SYSTEM_LIBRARY", "PYTHONPATH")
    }
    for k, v in changes.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


@pytest.fixture(scope="module")
def pc_path() -> str:
    pc = PREFIX_LIB / "pkgconfig"
    if not (pc / "eventq.pc").exists():
        pytest.skip(f"no eventq.pc next to {LIB}: the library was not loaded from an install prefix")
    return str(pc)


def test_eventq_library_names_the_file() -> None:
    r = run_python(SHOW, env(EVENTQ_LIBRARY=str(LIB)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(LIB), eventq.library_version]


def test_a_wrong_eventq_library_is_an_error_not_a_fallback(pc_path: str) -> None:
    r = run_python(SHOW, env(EVENTQ_LIBRARY="/nonexistent/libeventq.so.0", PKG_CONFIG_PATH=pc_path))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "EVENTQ_LIBRARY" in r.stderr and "/nonexistent/libeventq.so.0" in r.stderr


@pytest.fixture
def bundled() -> Path:
    path = Path(sys.modules["eventq._ffi"].BUNDLED)
    if not path.exists():
        pytest.skip(f"the package was installed without its bundled library ({path})")
    return path


def test_the_bundled_library_by_default(bundled: Path, pc_path: str) -> None:
    """Before pkg-config's and the loader's, though both would find one."""
    r = run_python(SHOW, env(PKG_CONFIG_PATH=pc_path, LD_LIBRARY_PATH=str(PREFIX_LIB)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(bundled), eventq.library_version]


def test_prefer_the_system_library_falls_back_to_the_bundled_one(bundled: Path) -> None:
    if ctypes.util.find_library("eventq"):
        pytest.skip("libeventq is installed system-wide: the loader would find it")
    r = run_python(SHOW, env(EVENTQ_USE_SYSTEM_LIBRARY="1", PKG_CONFIG="/nonexistent/pkg-config"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(bundled)


@pytest.mark.parametrize("value", ["0", "", "no"])
def test_prefer_the_system_library_off(bundled: Path, pc_path: str, value: str) -> None:
    r = run_python(SHOW, env(EVENTQ_USE_SYSTEM_LIBRARY=value, PKG_CONFIG_PATH=pc_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(bundled)


def test_pkg_config(pc_path: str) -> None:
    r = run_python(SHOW, env(EVENTQ_USE_SYSTEM_LIBRARY="1", PKG_CONFIG_PATH=pc_path))
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.split()[0]) == PREFIX_LIB / "libeventq.so.0"


def test_dynamic_loader() -> None:
    r = run_python(
        SHOW, env(EVENTQ_USE_SYSTEM_LIBRARY="1", PKG_CONFIG="/nonexistent/pkg-config", LD_LIBRARY_PATH=str(PREFIX_LIB))
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(LIB)  # the file the loader found, not just its name


def test_nothing_found_says_what_to_do(tmp_path: Path) -> None:
    """A copy of the package without its bundled library, and no other."""
    if ctypes.util.find_library("eventq"):
        pytest.skip("libeventq is installed system-wide: the loader would find it")
    pkg = Path(eventq.__file__).parent
    shutil.copytree(pkg, tmp_path / "eventq", ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    r = run_python(SHOW, env(PKG_CONFIG="/nonexistent/pkg-config", PKG_CONFIG_PATH="", PYTHONPATH=str(tmp_path)))
    assert r.returncode != 0
    msg = r.stderr.strip().splitlines()[-1]
    assert msg.startswith("ImportError: eventq: cannot load libeventq")
    assert "install libeventq" in msg and "EVENTQ_LIBRARY" in msg and "pkg-config is not installed" in msg
    assert "no bundled library" in msg and "install the eventq wheel" in msg


@pytest.mark.parametrize("version", ["1.0.0", "0.1.0"])
def test_an_incompatible_library_is_refused(tmp_path: Path, version: str) -> None:
    """A library whose eventq_version() says another major version, or an
    older minor one (0.1 had another ABI; a 0.x keeps 0.2's from 0.2 on)."""
    major, minor, patch = (int(x) for x in version.split("."))
    src = tmp_path / "fake.c"
    src.write_text(
        "#include <stdint.h>\n"
        f"uint32_t eventq_version(void) {{ return {(major << 16) | (minor << 8) | patch}u; }}\n"
        f'const char *eventq_version_string(void) {{ return "{version}"; }}\n'
    )
    so = compile_c(src, tmp_path / "libeventq.so.0", shared=True)
    r = run_python(SHOW, env(EVENTQ_LIBRARY=str(so)))
    assert r.returncode != 0
    ours = f"{eventq._lib.EVENTQ_VERSION_MAJOR}.{eventq._lib.EVENTQ_VERSION_MINOR}"
    assert f"is libeventq {version}; this binding needs libeventq {ours} or a later" in r.stderr, r.stderr
