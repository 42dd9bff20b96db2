# SPDX-License-Identifier: MIT OR Apache-2.0
"""The wheel (make test-python-wheel): what it carries, and that it works
alone, installed in a fresh venv with no other libeventq in reach.

EVENTQ_WHEEL_DIR holds the one wheel to check (auditwheel's repair of
`pip wheel ./bindings/python`), EVENTQ_WHEEL_DEPS the wheels of its
dependencies (cffi) for an install without an index, EVENTQ_TEST_PREFIX
the test install (build/prefix), which only the tests of the system
library may see.
"""

from __future__ import annotations

import email.parser
import os
import platform
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PY_DIR = REPO / "bindings" / "python"
SONAME = "libeventq.so.0"
# What must not leak into the fresh venv's runs.
SCRUBBED = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PKG_CONFIG_PATH", "EVENTQ_LIBRARY",
            "EVENTQ_USE_SYSTEM_LIBRARY", "PYTHONPATH", "PYTHONHOME")


def env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests with make test-python-wheel")
    return Path(value)


def version_of_cargo() -> str:
    text = (REPO / "Cargo.toml").read_text()
    m = re.search(r'^\[package\]\s*$.*?^version\s*=\s*"([^"]+)"', text, flags=re.M | re.S)
    assert m, "no [package] version in Cargo.toml"
    return m[1]


@pytest.fixture(scope="session")
def wheel() -> Path:
    wheels = sorted(env_path("EVENTQ_WHEEL_DIR").glob("eventq-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, found {wheels}"
    return wheels[0]


@pytest.fixture(scope="session")
def zf(wheel: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="session")
def dist_info(zf: zipfile.ZipFile) -> str:
    names = {n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info")}
    assert len(names) == 1, names
    return names.pop()


@pytest.fixture(scope="session")
def metadata(zf: zipfile.ZipFile, dist_info: str) -> email.message.Message:
    return email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A venv with nothing but the wheel and its dependencies, installed
    without an index (pip of the test venv, --python)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    venv.EnvBuilder(with_pip=False, clear=True).create(root)
    python = root / "bin" / "python"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
         "--disable-pip-version-check", "--no-index", "--find-links", str(env_path("EVENTQ_WHEEL_DEPS")),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return python


def clean_env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(changes)
    return env


def run_in(python: Path, args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Runs the fresh venv's python outside the source tree (cwd tmp_path),
    so `import eventq` can only be the installed package."""
    return subprocess.run([str(python), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=clean_env(**env), timeout=120)


# Prints the loaded library as the package says and as the process maps show.
SHOW = r"""
import eventq, sys
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libeventq" in l})
print(eventq.library_path)
print(eventq.library_version)
print(eventq.__version__)
print(" ".join(maps))
print("asyncio" in sys.modules, "pycparser" in sys.modules)
"""


# --- the wheel's contents ----------------------------------------------------


def test_platform_tag(wheel: Path, zf: zipfile.ZipFile, dist_info: str) -> None:
    """py3-none-<platform>, never py3-none-any: it carries a shared library."""
    m = re.fullmatch(r"eventq-([^-]+)-py3-none-(.+)\.whl", wheel.name)
    assert m, wheel.name
    arch = platform.machine()
    plats = m[2].split(".")
    assert all(re.fullmatch(rf"(manylinux_\d+_\d+|manylinux\d+|linux)_{arch}", p) for p in plats), plats
    wheel_info = zf.read(f"{dist_info}/WHEEL").decode().splitlines()
    tags = [line.split(": ", 1)[1] for line in wheel_info if line.startswith("Tag: ")]
    assert tags == [f"py3-none-{p}" for p in plats], tags
    assert "Root-Is-Purelib: false" in wheel_info


def test_manylinux(wheel: Path) -> None:
    """auditwheel found the library within a manylinux policy (the glibc
    symbol versions it needs, and only system libraries it links)."""
    assert "manylinux_" in wheel.name, f"{wheel.name}: auditwheel repair kept the linux tag"


def test_the_library_is_inside(zf: zipfile.ZipFile, tmp_path: Path) -> None:
    names = zf.namelist()
    assert f"eventq/_lib/{SONAME}" in names, names
    assert "eventq/_abi.py" in names and "eventq/_cdef.py" in names and "eventq/py.typed" in names
    assert not [n for n in names if n.startswith(("tests", "setup.py", "examples"))], names
    so = tmp_path / SONAME
    so.write_bytes(zf.read(f"eventq/_lib/{SONAME}"))
    dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert f"Library soname: [{SONAME}]" in dyn, dyn
    needed = re.findall(r"Shared library: \[([^\]]+)\]", dyn)
    assert not [n for n in needed if "eventq" in n], needed
    assert "RPATH" not in dyn and "RUNPATH" not in dyn, dyn  # nothing outside the wheel
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True, env=clean_env(), check=True).stdout
    assert "not found" not in ldd and "eventq" not in ldd.replace(str(so), ""), ldd
    assert str(env_path("EVENTQ_TEST_PREFIX")) not in ldd and str(REPO) not in ldd, ldd
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(so)], capture_output=True, text=True, check=True).stdout
    # The library C users get: each symbol under its eventq.map version node.
    assert re.search(r"\beventq_version@@EVENTQ_0\.2\b", syms), "eventq_version is not versioned EVENTQ_0.2"
    assert re.search(r"\beventq_memcg_watch_fd@@EVENTQ_0\.3\b", syms), "eventq_memcg_watch_fd is not EVENTQ_0.3"
    debug = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True, text=True, check=True).stdout
    assert ".debug_info" not in debug, "the bundled library keeps its debug info"


def test_licences(zf: zipfile.ZipFile, dist_info: str, metadata: email.message.Message) -> None:
    """PEP 639: the SPDX expression and both licence texts, as in the repository."""
    assert metadata["Metadata-Version"] in ("2.4", "2.5"), metadata["Metadata-Version"]
    assert metadata["License-Expression"] == "MIT OR Apache-2.0"
    assert sorted(metadata.get_all("License-File") or []) == ["LICENSE-APACHE", "LICENSE-MIT"]
    for name in ("LICENSE-MIT", "LICENSE-APACHE"):
        assert zf.read(f"{dist_info}/licenses/{name}") == (REPO / name).read_bytes(), name


def test_metadata(metadata: email.message.Message) -> None:
    assert metadata["Name"] == "eventq"
    assert metadata["Version"] == version_of_cargo()
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert urls.get("Repository") == "https://github.com/libeventq/libeventq", urls
    assert {"Documentation", "Changelog"} <= set(urls), urls
    assert any(r.startswith("cffi") for r in metadata.get_all("Requires-Dist") or [])
    assert metadata["Requires-Python"] == ">=3.9"


# --- installed alone ---------------------------------------------------------


def test_loads_the_bundled_library_alone(fresh_venv: Path, tmp_path: Path) -> None:
    """No LD_LIBRARY_PATH, PKG_CONFIG_PATH or EVENTQ_LIBRARY: the library
    mapped is the wheel's, and the only libeventq in the process."""
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path)
    assert r.returncode == 0, r.stderr
    path, lib_version, py_version, maps, lazy = r.stdout.splitlines()
    site = Path(subprocess.run([str(fresh_venv), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip())
    bundled = site / "eventq" / "_lib" / SONAME
    assert Path(path) == bundled, path
    assert maps.split() == [str(bundled.resolve())], maps
    assert lib_version == version_of_cargo() and py_version == version_of_cargo()
    # Thread users pay for neither asyncio nor cffi's C parser.
    assert lazy == "False False", lazy


@pytest.mark.parametrize("example", ["asyncio_pipe.py", "threads_pipe.py"])
def test_examples(fresh_venv: Path, tmp_path: Path, example: str) -> None:
    r = run_in(fresh_venv, [str(PY_DIR / "examples" / example), "2000"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "each once" in r.stdout, r.stdout


def test_memwatch_help(fresh_venv: Path, tmp_path: Path) -> None:
    r = run_in(fresh_venv, ["-m", "eventq.memwatch", "--help"], tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m eventq.memwatch"), r.stdout + r.stderr


# --- the choice of library ---------------------------------------------------


def prefix_lib() -> Path:
    lib = env_path("EVENTQ_TEST_PREFIX") / "lib"
    assert (lib / SONAME).exists(), f"no {SONAME} in {lib}"
    return lib


def test_eventq_library_wins(fresh_venv: Path, tmp_path: Path) -> None:
    lib = prefix_lib() / SONAME
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path, EVENTQ_LIBRARY=str(lib))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(lib)


def test_prefer_the_system_library(fresh_venv: Path, tmp_path: Path) -> None:
    """EVENTQ_USE_SYSTEM_LIBRARY=1: pkg-config's, then the loader's, before
    the bundled one; without a system library, still the bundled one."""
    lib = prefix_lib()
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path, EVENTQ_USE_SYSTEM_LIBRARY="1",
               PKG_CONFIG_PATH=str(lib / "pkgconfig"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(lib / SONAME)
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path, EVENTQ_USE_SYSTEM_LIBRARY="1", LD_LIBRARY_PATH=str(lib),
               PKG_CONFIG="/nonexistent/pkg-config")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str((lib / SONAME).resolve())
    assert r.stdout.splitlines()[3] == str((lib / SONAME).resolve())
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path, EVENTQ_USE_SYSTEM_LIBRARY="1", PKG_CONFIG="/nonexistent/pkg-config")
    if "/_lib/" not in r.stdout.split("\n", 1)[0]:
        pytest.skip("a system-wide libeventq is installed: the loader found it")
    assert r.returncode == 0, r.stderr


def test_an_old_system_library_is_refused_by_path(fresh_venv: Path, tmp_path: Path) -> None:
    """Preferred but too old: an ImportError naming the file and the way
    back to the bundled library, not a crash at the first missing symbol."""
    src = tmp_path / "old.c"
    src.write_text(
        "#include <stdint.h>\n"
        "uint32_t eventq_version(void) { return (0u << 16) | (1u << 8); }\n"
        'const char *eventq_version_string(void) { return "0.1.0"; }\n'
    )
    libdir = tmp_path / "old"
    libdir.mkdir()
    so = libdir / SONAME
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    r = run_in(fresh_venv, ["-c", SHOW], tmp_path, EVENTQ_USE_SYSTEM_LIBRARY="1", LD_LIBRARY_PATH=str(libdir),
               PKG_CONFIG="/nonexistent/pkg-config")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: eventq: {so} (the dynamic loader) is libeventq 0.1.0"), last
    assert "unset EVENTQ_USE_SYSTEM_LIBRARY" in last, last


# --- building outside the tree -------------------------------------------------


def test_a_build_outside_the_tree_says_what_it_needs(tmp_path: Path) -> None:
    """A copy of bindings/python (as an sdist unpacks) finds no source tree
    two levels up: the build stops and names EVENTQ_SOURCE_DIR."""
    src = tmp_path / "a" / "b" / "eventq-src"
    shutil.copytree(PY_DIR, src, symlinks=False,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests*", "bench"))
    env = clean_env()
    env.pop("EVENTQ_SOURCE_DIR", None)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         "-w", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "building the wheel needs the libeventq source tree" in out and "EVENTQ_SOURCE_DIR" in out, out
    assert not list((tmp_path / "out").glob("*.whl"))
