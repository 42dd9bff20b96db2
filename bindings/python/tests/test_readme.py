# SPDX-License-Identifier: MIT OR Apache-2.0
"""Every ```python block of bindings/python/README.md runs (in a fresh
interpreter), so the examples cannot rot."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from conftest import run_python

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int) -> None:
    code = BLOCKS[index]
    for module in re.findall(r"^import (\w+)$", code, flags=re.M):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the example needs {module}, which is not installed")
    r = run_python(code)
    assert r.returncode == 0, f"README block {index}:\n{code}\n{r.stderr}"
