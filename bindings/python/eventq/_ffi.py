# SPDX-License-Identifier: MIT OR Apache-2.0
"""The C ABI of libeventq for cffi (ABI mode), and the loading of the library.

The declarations are in _cdef.py. A built package has them pre-parsed in
_abi.py (cffi's out-of-line ABI mode, written by setup.py), so an import
neither loads cffi's C parser nor parses them; without it (a source tree
on sys.path) they are parsed here.

The library is the first of, in this order:

1. the EVENTQ_LIBRARY environment variable (a path; if set, nothing else is
   tried: a wrong path is an error, not a silent fallback);
2. the copy bundled in the wheel, eventq/_lib/libeventq.so.0 (built from
   the same source tree as the package);
3. the system's: the libdir of `pkg-config eventq`, then the dynamic
   loader's search for libeventq.so.0.

EVENTQ_USE_SYSTEM_LIBRARY=1 puts the system's before the bundled one.
Whichever loads must be of this binding's major version and at least its
minor one (_cdef.py); another is an ImportError naming its path.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

SONAME = "libeventq.so.0"

#: Where a wheel carries the library.
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", SONAME)


def _make_ffi() -> Any:
    """The pre-parsed declarations if they match _cdef.CDEF, else parsed now."""
    from ._cdef import CDEF

    try:
        from . import _abi
    except ImportError:
        _abi = None
    if _abi is not None and getattr(_abi, "CDEF_CRC32", None) == _crc32(CDEF):
        return _abi.ffi
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi


def _crc32(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


ffi = _make_ffi()


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false", "off")


def _pkg_config_libdir() -> tuple[str | None, str]:
    """The libdir pkg-config reports for eventq, or None and why not."""
    import shutil
    import subprocess

    exe = shutil.which(os.environ.get("PKG_CONFIG", "pkg-config"))
    if exe is None:
        return None, "pkg-config is not installed"
    try:
        out = subprocess.run(
            [exe, "--variable=libdir", "eventq"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pkg-config failed: {e}"
    libdir = out.stdout.strip()
    if out.returncode != 0 or not libdir:
        return None, "pkg-config does not know eventq (is eventq.pc on PKG_CONFIG_PATH?)"
    # eventq.pc is relocatable (prefix=${pcfiledir}/../..): resolve the "..".
    return os.path.realpath(libdir), ""


def _system(tried: list[str]) -> Iterator[tuple[str, str]]:
    libdir, why = _pkg_config_libdir()
    if libdir is None:
        tried.append(why)
    else:
        yield "pkg-config", os.path.join(libdir, SONAME)
    yield "the dynamic loader", SONAME


def _bundled(tried: list[str]) -> Iterator[tuple[str, str]]:
    if os.path.exists(BUNDLED):
        yield "the bundled library", BUNDLED
    else:
        tried.append(f"no bundled library ({BUNDLED}: the package was installed without it)")


def _candidates(tried: list[str]) -> Iterator[tuple[str, str]]:
    """(how, path) in the order of the module docstring, made lazily: the
    bundled library, when it loads, costs no pkg-config run."""
    env = os.environ.get("EVENTQ_LIBRARY")
    if env:
        yield "EVENTQ_LIBRARY", env
    elif _flag("EVENTQ_USE_SYSTEM_LIBRARY"):
        yield from _system(tried)
        yield from _bundled(tried)
    else:
        yield from _bundled(tried)
        yield from _system(tried)


def _mapped_file(lib: Any) -> str | None:
    """The file the dynamic loader mapped for lib (found by name): the one
    whose mapping holds eventq_version's code."""
    addr = int(ffi.cast("uintptr_t", lib.eventq_version))
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                lo, _, hi = fields[0].partition("-")
                if len(fields) == 6 and int(lo, 16) <= addr < int(hi, 16):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def _load() -> tuple[Any, str]:
    """Opens the library as the module docstring says; ImportError if none."""
    tried: list[str] = []
    for how, path in _candidates(tried):
        try:
            lib = ffi.dlopen(path)
        except OSError as e:
            tried.append(f"{how}: {path}: {e}")
            continue
        if os.sep not in path:  # the loader's search: say which file it found
            path = _mapped_file(lib) or path
        # eventq_version() is in every release: it is safe to call first.
        version = lib.eventq_version()
        major, minor = version >> 16, (version >> 8) & 0xFF
        want_major, want_minor = lib.EVENTQ_VERSION_MAJOR, lib.EVENTQ_VERSION_MINOR
        if major != want_major or minor < want_minor:
            text = ffi.string(lib.eventq_version_string()).decode()
            hint = ""
            if how != "EVENTQ_LIBRARY" and _flag("EVENTQ_USE_SYSTEM_LIBRARY") and os.path.exists(BUNDLED):
                hint = f" (unset EVENTQ_USE_SYSTEM_LIBRARY to use the bundled {BUNDLED})"
            raise ImportError(
                f"eventq: {path} ({how}) is libeventq {text}; this binding needs libeventq "
                f"{want_major}.{want_minor} or a later {want_major}.x release{hint}"
            )
        return lib, path
    if os.environ.get("EVENTQ_LIBRARY"):
        hint = "EVENTQ_LIBRARY must name libeventq's shared library (libeventq.so.0)"
    else:
        hint = (
            "install the eventq wheel, which carries the library, or install libeventq "
            "(make install in the libeventq source tree, which also installs eventq.pc "
            f"for pkg-config), or set EVENTQ_LIBRARY to the path of {SONAME}"
        )
    raise ImportError(f"eventq: cannot load libeventq: {hint}. Tried: " + "; ".join(tried))


lib, library_path = _load()
