"""benchmarks/train_throughput.py --quick runs to the end on 2 gloo ranks (ours only), and with
`--dense-precision bf16` prints the CPU's bfloat16 support and the bf16 rows beside the fp32
ones (issue 28: "the bf16 option measured"). Checks the report's shape, not speed."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput.py"


def _rows(out: str) -> dict[str, list[float]]:
    """The result table: library label -> its numbers (step, fwd, bwd, opt, samples/s, CPU)."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and not line.startswith("| library") and len(cells) == 7:
            rows[cells[0]] = [float(c.replace(",", "")) for c in cells[1:]]
    return rows


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_quick_run_prints_every_row(precision: str) -> None:
    cmd = [sys.executable, str(SCRIPT), "--quick", "--no-torchrec", "--dense-precision", precision]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert out.startswith("machine: ") and "shapes: 4 tables x 1000 rows" in out, out
    rows = _rows(out)
    want = ["shardrec (ours)", "dense part alone (same math in both)"]
    if precision == "bf16":
        want[1:1] = ["shardrec (ours), bf16 dense part"]
        want.append("dense part alone, bf16")
        assert any(
            line.startswith(("bf16: native (", "bf16: emulated (")) for line in out.splitlines()
        ), out
        assert "bf16 dense part: ours fp32 / ours bf16 step " in out, out
    else:
        assert "bf16" not in out, out
    assert list(rows) == want, out
    for label, numbers in rows.items():
        assert numbers[0] > 0 and numbers[4] > 0, label  # step ms, samples/s
