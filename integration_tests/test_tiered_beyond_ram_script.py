"""benchmarks/tiered_beyond_ram.py at a tiny size: the planner tiers every table, the tiered run
trains, its losses equal the in-memory reference's step by step, and the store is removed."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "tiered_beyond_ram.py"
_spec = importlib.util.spec_from_file_location("tiered_beyond_ram", SCRIPT)
assert _spec is not None and _spec.loader is not None
beyond_ram = importlib.util.module_from_spec(_spec)
sys.modules["tiered_beyond_ram"] = beyond_ram
_spec.loader.exec_module(beyond_ram)


def test_quick_run_matches_the_reference_and_cleans_up(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    result = beyond_ram.main(["--quick", "--store-dir", str(store)])
    assert not store.exists()
    assert result["max_loss_diff"] < 1e-6
    assert len(result["losses"]) == 5 and result["ref_losses"] == pytest.approx(result["losses"])
    assert 0 < result["ref_rows"] < result["table_bytes"] // 260
    assert result["peak_rss"] > 0
    out = capsys.readouterr().out
    assert "disk tier" in out and "tier disk (key_value)" in out and "max |diff|" in out


def test_init_rows_are_a_function_of_table_row_and_column() -> None:
    torch = pytest.importorskip("torch")
    a = beyond_ram.init_rows(1, torch.arange(10), 8)
    b = beyond_ram.init_rows(1, torch.tensor([3, 7]), 8)
    assert torch.equal(a[[3, 7]], b)
    assert not torch.equal(a, beyond_ram.init_rows(2, torch.arange(10), 8))
    assert a.abs().max() <= beyond_ram.INIT_SCALE
    init = beyond_ram.RowInit(1, 8)
    chunks = [torch.empty(4, 8), torch.empty(6, 8)]
    for c in chunks:
        init(c)
    assert torch.equal(torch.cat(chunks), a)
