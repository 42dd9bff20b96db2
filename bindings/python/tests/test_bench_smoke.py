# SPDX-License-Identifier: MIT OR Apache-2.0
"""bench/handoff.py with tiny counts: every configuration delivers every
message once and in order (its own check); speed is not looked at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "handoff.py"


def test_handoff_benchmark_smoke() -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--smoke"], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "delivery: every run received every message once, in order" in r.stdout
    assert r.stdout.count("K msg/s") == 1
