"""benchmarks/dynamic_sharded.py --quick runs to the end on 2 gloo ranks and prints every row
(the machine line, the shapes, TorchRec's answer, one row per case with both timings)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "dynamic_sharded.py"


def test_quick_run_prints_every_case() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("machine: ") and "shapes: 2 tables x capacity 4000" in out, out
    assert "TorchRec 1.8" in out, out
    rows = [line for line in out.splitlines() if line.startswith(("| dynamic", "| mc-ebc"))]
    cases = [tuple(c.strip() for c in row.split("|")[1:4]) for row in rows]
    assert cases == [
        ("dynamic", "row_wise", "resident"),
        ("dynamic", "row_wise", "stream"),
        ("dynamic", "table_wise", "resident"),
        ("dynamic", "table_wise", "stream"),
        ("mc-ebc", "row_wise", "stream"),
    ], out
    for row in rows:
        ratio = row.split("|")[-2]
        assert all(float(r) > 0 for r in ratio.split("/")), row  # both sides timed
