# SPDX-License-Identifier: MIT OR Apache-2.0
"""The cffi declarations (eventq/_cdef.py) against include/eventq.h and the
loaded library, so a change of the C ABI is caught here, declaration by
declaration, instead of as a crash.

The header is parsed with cffi itself (comments and preprocessor lines
removed, #define values evaluated), then compared with the package's
declarations: the same functions with the same types, the same typedefs,
the same struct fields with the same types and offsets, the same constants.
Struct layouts are also checked against the C compiler's. The package's
own FFI, pre-parsed at build time (eventq/_abi.py, out-of-line ABI mode),
is checked against the declarations parsed here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import cffi
import pytest

import eventq
from eventq._cdef import CDEF
from eventq._ffi import ffi as pkg_ffi
from eventq._ffi import lib as pkg_lib

# The declarations, parsed here: an out-of-line FFI cannot list an opaque
# struct's fields (cffi asserts), and it names typedef'd structs by tag.
ffi = cffi.FFI()
ffi.cdef(CDEF)
lib = ffi.dlopen(eventq.library_path)

from conftest import compile_c

# A fix release changes these without changing the ABI (the binding checks
# the major and minor versions at load time).
VERSION_MACROS = {"EVENTQ_VERSION_PATCH", "EVENTQ_VERSION"}
TYPE_VALUES = {"SIZE_MAX": 2**64 - 1}


def header_path() -> Path:
    """include/eventq.h of the source tree, else the installed header."""
    repo = Path(__file__).resolve().parents[3] / "include" / "eventq.h"
    if repo.exists():
        return repo
    installed = Path(eventq.library_path).resolve().parent.parent / "include" / "eventq.h"
    if installed.exists():
        return installed
    pytest.fail("cannot find include/eventq.h (run from the libeventq source tree)")


def _eval_define(expr: str, defines: dict[str, int]) -> int:
    """The value of a #define: integer literals, casts, << | + -, names."""
    expr = re.sub(r"\((?:u?int\d+_t|size_t|unsigned|int)\)", "", expr)
    expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr)
    tree = ast.parse(expr, mode="eval")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in defines:
                return defines[node.id]
            return TYPE_VALUES[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            ops = {ast.LShift: lambda a, b: a << b, ast.BitOr: lambda a, b: a | b,
                   ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b}
            return ops[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"cannot evaluate #define value {expr!r}")

    return ev(tree)


def parse_header() -> tuple[dict[str, int], str]:
    """(the #define constants, the declarations as cffi can parse them)."""
    text = header_path().read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    defines: dict[str, int] = {}
    body = []
    for line in text.splitlines():
        m = re.match(r"\s*#\s*define\s+(\w+)\s+(\S.*)$", line)
        if m:
            defines[m[1]] = _eval_define(m[2].strip(), defines)
        elif not line.lstrip().startswith("#"):
            body.append(line)
    return defines, "\n".join(body)


@pytest.fixture(scope="module")
def header() -> tuple[dict[str, int], cffi.FFI, object]:
    defines, decls = parse_header()
    ffi_h = cffi.FFI()
    ffi_h.cdef(decls)
    return defines, ffi_h, ffi_h.dlopen(eventq.library_path)


def functions(lib_: object) -> set[str]:
    return {n for n in dir(lib_) if not isinstance(getattr(lib_, n), int)}


def test_every_declared_function_is_in_the_library() -> None:
    names = functions(lib)
    assert len(names) > 40
    for name in sorted(names):
        assert callable(getattr(lib, name)), name  # AttributeError if the library lacks it


def test_functions_match_the_header(header) -> None:
    _, ffi_h, lib_h = header
    ours, theirs = functions(lib), functions(lib_h)
    assert sorted(theirs - ours) == [], "in include/eventq.h but not declared in eventq/_cdef.py"
    assert sorted(ours - theirs) == [], "declared in eventq/_cdef.py but not in include/eventq.h"
    for name in sorted(ours):
        assert ffi.typeof(getattr(lib, name)).cname == ffi_h.typeof(getattr(lib_h, name)).cname, name


def test_types_match_the_header(header) -> None:
    _, ffi_h, _ = header
    assert ffi.list_types() == ffi_h.list_types()
    typedefs, structs, _unions = ffi.list_types()
    for name in typedefs:
        assert ffi.typeof(name).cname == ffi_h.typeof(name).cname, name
    for name in structs:
        ours, theirs = ffi.typeof(f"struct {name}"), ffi_h.typeof(f"struct {name}")
        if theirs.fields is None:
            assert ours.fields is None, f"struct {name} is opaque in the header"
            continue
        assert [(f, t.type.cname, t.offset) for f, t in ours.fields] == [
            (f, t.type.cname, t.offset) for f, t in theirs.fields
        ], f"struct {name}"
        assert ffi.sizeof(ours) == ffi_h.sizeof(theirs), f"struct {name}"


def test_constants_match_the_header(header) -> None:
    defines, _, _ = header
    theirs = {k: v for k, v in defines.items() if k not in VERSION_MACROS}
    ours = {n: getattr(lib, n) for n in dir(lib) if isinstance(getattr(lib, n), int)}
    assert ours == theirs
    assert lib.EVENTQ_VERSION_MAJOR == lib.eventq_version() >> 16
    assert lib.EVENTQ_VERSION_MINOR <= (lib.eventq_version() >> 8) & 0xFF


def test_struct_layouts_match_the_compiler(tmp_path: Path) -> None:
    """sizeof and offsetof as cc computes them from the installed header."""
    _, structs, _ = ffi.list_types()
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <eventq.h>", "int main(void) {"]
    expected = {}
    for name in structs:
        t = ffi.typeof(f"struct {name}")
        if t.fields is None:
            continue
        lines.append(f'printf("struct {name} %zu\\n", sizeof(struct {name}));')
        expected[f"struct {name}"] = ffi.sizeof(t)
        for field, _ in t.fields:
            lines.append(f'printf("struct {name}.{field} %zu\\n", offsetof(struct {name}, {field}));')
            expected[f"struct {name}.{field}"] = ffi.offsetof(t, field)
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = compile_c(src, tmp_path / "layout", shared=False)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    actual = {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}
    assert actual == expected
    assert len(expected) > 20


def _plain(cname: str) -> str:
    """A C type name with `struct X` written X (every struct here has a
    typedef of its own tag's name)."""
    return re.sub(r"\bstruct (\w+)", r"\1", cname)


def test_the_package_uses_these_declarations() -> None:
    """The FFI the package loaded (pre-parsed or not) has the same
    functions, types, struct layouts and constants as _cdef.py."""
    assert functions(pkg_lib) == functions(lib)
    for name in sorted(functions(lib)):
        assert _plain(pkg_ffi.typeof(getattr(pkg_lib, name)).cname) == _plain(
            ffi.typeof(getattr(lib, name)).cname
        ), name
    assert pkg_ffi.list_types() == ffi.list_types()
    _, structs, _ = ffi.list_types()
    for name in structs:
        t = ffi.typeof(f"struct {name}")
        if t.fields is None:
            continue
        assert pkg_ffi.sizeof(f"struct {name}") == ffi.sizeof(t), name
        for field, _ in t.fields:
            assert pkg_ffi.offsetof(f"struct {name}", field) == ffi.offsetof(t, field), (name, field)
    ours = {n: getattr(lib, n) for n in dir(lib) if isinstance(getattr(lib, n), int)}
    assert {n: getattr(pkg_lib, n) for n in ours} == ours
