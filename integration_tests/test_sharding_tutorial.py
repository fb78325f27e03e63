"""The TorchRec sharding tutorial (examples/sharding_tutorial.py) runs with gloo on CPU.

Runs every sharding type: the two whose output the notebook shows (table_wise, row_wise), the two
it describes (column_wise, table_row_wise) and data_parallel and table_column_wise. Each run spawns
two ranks, plans with per-table constraints, shards, prints the plan and checks one batch against
the unsharded module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sharding_tutorial.py"
TYPES = [
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "data_parallel",
    "table_column_wise",
]


def test_sharding_tutorial_runs_on_gloo() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--types", *TYPES],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    for rank in (0, 1):
        assert f"rank:{rank},sharding plan:" in out
    # table_wise: whole tables, placed on both ranks; row_wise: 2048-row blocks of large tables
    assert "(0,0)+4096x64@rank:0/cpu" in out and "(0,0)+4096x64@rank:1/cpu" in out
    assert "(2048,0)+2048x64@rank:1/cpu" in out
    for sharding_type in TYPES:
        assert f"  {sharding_type}  " in out, sharding_type
