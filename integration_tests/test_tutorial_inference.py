"""The intro tutorial's inference cells (examples/tutorial_intro_inference.py) run on CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tutorial_intro_inference.py"


def test_tutorial_inference_cells_run() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "ebc_.embedding_bags.product_table.weight torch.Size([4096, 64]) torch.float32" in out
    assert "ebc_.embedding_bags.user_table.weight (4096, 64) torch.uint8" in out
    assert "ebc_.embedding_bags.user_table.weight_qscaleshift (4096, 4) torch.uint8" in out
    error = float(re.search(r"max \|quantized - float\|: ([0-9.e-]+)", out).group(1))  # type: ignore[union-attr]
    # INT8 of a uniform(+-1/64) table: scale <= 2/64/255 per row, 3 rows per bag at most
    assert 0 < error <= 3 * (2 / 64 / 255) / 2 + 1e-6
    assert "product_table: row_wise on ranks [0, 1]" in out
    assert "user_table: table_wise on ranks [" in out
    sharded = float(re.search(r"sharded max \|sharded - unsharded\|: ([0-9.e+-]+)", out).group(1))  # type: ignore[union-attr]
    assert sharded <= 1e-6
    assert "scripted equals eager: True" in out
    assert "exported equals eager: True" in out
