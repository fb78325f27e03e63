"""benchmarks/dynamic_routing.py --quick runs to the end and prints its rows (the machine line,
the shapes, hash, bucket and floor with their timings)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from shardrec_sharding import _dynamic_exchange as X

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "dynamic_routing.py"


def test_quick_run_prints_every_case() -> None:
    if X._native() is None:
        pytest.skip("the script times the native pass; the native kernels are off here")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--world", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "world 3" in lines[1], lines
    assert [line.split()[0] for line in lines[2:]] == ["hash", "bucket", "floor"], lines
    assert all("ms CPU" in line for line in lines[2:]), lines
