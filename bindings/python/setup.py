# SPDX-License-Identifier: MIT OR Apache-2.0
"""The build steps pyproject.toml cannot say: the wheel carries libeventq.

build_py adds to the package, beside the Python files:

- eventq/_lib/libeventq.so.0, made by `make build/lib/libeventq.so` in the
  libeventq source tree (the library C users get: linked with eventq.map,
  so its symbols are versioned), with its debug info stripped as
  `make install` does;
- eventq/_abi.py, the declarations of eventq/_cdef.py parsed once, here
  (cffi's out-of-line ABI mode), so an import does not parse them.

The source tree is EVENTQ_SOURCE_DIR if set, else the one this directory is
in (bindings/python). The wheel is tagged py3-none-<platform>: one wheel
for every Python 3, since cffi's ABI mode compiles nothing against Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SONAME = "libeventq.so.0"
# What a libeventq source tree has at its root (its Makefile builds the
# library, whatever the layout of the crates under it).
TREE_FILES = ("Makefile", "Cargo.toml")


def source_dir() -> str:
    env = os.environ.get("EVENTQ_SOURCE_DIR")
    root = os.path.abspath(env) if env else os.path.dirname(os.path.dirname(HERE))
    if all(os.path.exists(os.path.join(root, f)) for f in TREE_FILES):
        return root
    where = f"EVENTQ_SOURCE_DIR={env}" if env else f"{root} (two levels above {HERE})"
    raise SystemExit(
        f"eventq: building the wheel needs the libeventq source tree to build libeventq.so, "
        f"and {where} is not one (no {' or '.join(TREE_FILES)}). Build from the source "
        f"tree (pip install ./bindings/python) or set EVENTQ_SOURCE_DIR to it."
    )


def make_env() -> dict[str, str]:
    # A make that runs pip runs this: its jobserver fds are not ours.
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        pkg = os.path.join(self.build_lib, "eventq")
        self.write_abi(pkg)
        self.bundle_library(pkg)

    def write_abi(self, pkg: str) -> None:
        import cffi

        ns: dict[str, object] = {}
        with open(os.path.join(HERE, "eventq", "_cdef.py")) as f:
            exec(compile(f.read(), "_cdef.py", "exec"), ns)
        cdef = ns["CDEF"]
        assert isinstance(cdef, str)
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source("eventq._abi", None)
        out = os.path.join(pkg, "_abi.py")
        ffi.emit_python_code(out)
        with open(out, "a") as f:  # _ffi.py uses it only if it matches _cdef.py
            f.write(f"\nCDEF_CRC32 = {zlib.crc32(cdef.encode())}\n")

    def bundle_library(self, pkg: str) -> None:
        root = source_dir()
        make = os.environ.get("MAKE", "make")
        if shutil.which(make) is None:
            raise SystemExit(f"eventq: {make} is missing: building the wheel runs make in {root}")
        target = "build/lib/libeventq.so"
        self.announce(f"eventq: {make} -C {root} {target}", level=2)
        subprocess.run([make, "-C", root, target], check=True, env=make_env())
        dest = os.path.join(pkg, "_lib", SONAME)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        src = os.path.join(root, target)
        objcopy = shutil.which(os.environ.get("OBJCOPY", "objcopy"))
        if objcopy:
            subprocess.run([objcopy, "--strip-debug", src, dest], check=True)
        else:
            shutil.copyfile(src, dest)
        os.chmod(dest, 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True  # it carries a shared library: platlib, a platform tag


class BdistWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
