"""benchmarks/sharded.py --quick prints, per sharding type, the step's floor measured in its rank
processes (benchmarks/_sharded_floor.py, issue 28): every piece a finite number, the floor sum
their total, ours and the ratio beside it. Checks the report's shape and arithmetic, not speed."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import re
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("_sharded_floor", BENCH / "_sharded_floor.py")
assert _spec is not None and _spec.loader is not None
floor = importlib.util.module_from_spec(_spec)
sys.modules["_sharded_floor"] = floor
_spec.loader.exec_module(floor)

ROW = re.compile(r"^\| (?:wall|CPU) \| (.*) \|$")


def _rows(out: str) -> list[list[str]]:
    return [m.group(1).split(" | ") for line in out.splitlines() if (m := ROW.match(line))]


def _check_row(cells: list[str]) -> None:
    pieces = [float(c) for c in cells[: len(floor.PIECES)]]
    total, ours, ratio = (float(c.rstrip("x")) for c in cells[len(floor.PIECES) : -1])
    assert all(math.isfinite(p) and p >= 0 for p in pieces)
    assert pieces[floor.PIECES.index("rest (assumed)")] == floor.REST_MS  # wall and CPU
    assert total == pytest.approx(sum(pieces), abs=0.04)  # the printed pieces round to 0.01 ms
    assert total > floor.REST_MS and ours > 0
    assert ratio == pytest.approx(ours / total, rel=0.06, abs=0.01)
    assert cells[-1] in {f"<= {floor.GOAL}x: met", f"<= {floor.GOAL}x: not met"}


def test_quick_run_prints_a_floor_beside_each_type() -> None:
    types = ["table_wise", "column_wise", "row_wise"]
    args = ["--types", ",".join(types), "--repeats", "2"]
    run = subprocess.run(
        [sys.executable, str(BENCH / "sharded.py"), "--quick", "--no-torchrec", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    for kind in types:
        assert f"floor of {kind} (rank 0;" in out
    rows = _rows(out)
    assert len(rows) == 2 * len(types)  # wall and CPU per type
    for cells in rows:
        _check_row(cells)
    # The exchanges of sharded types move bytes: the pieces that measure them are > 0.
    for cells in rows[::2]:  # wall rows (a CPU time may round to 0.00)
        for name in ("ids in", "lookup", "pooled rows out", "gradients back", "update"):
            assert float(cells[floor.PIECES.index(name)]) > 0, (name, cells)


def test_tables_of_one_width_share_a_buffer_with_offset_ids() -> None:
    torch = pytest.importorskip("torch")
    tables = [(10, 64), (5, 32), (7, 64)]
    ids = [torch.tensor([0, 9]), torch.tensor([4]), torch.tensor([1, 6])]
    got = floor._by_width(tables, ids)
    assert [(c, r) for c, r, _ in got] == [(32, 5), (64, 17)]
    assert got[0][2].tolist() == [4]
    assert got[1][2].tolist() == [0, 9, 11, 16]


def test_the_table_reports_ours_over_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    one = {k: 1.0 for k in floor.COUNTS}
    for piece, ms in zip(floor.PIECES, [1.0, 2.0, 1.0, 1.0, 3.0, floor.REST_MS], strict=True):
        one[piece], one[f"{piece} cpu"] = ms, ms / 2
    ours = [(20.0, 9.0, 0.0), (14.0, 7.0, 0.0), (16.0, 8.0, 0.0)]
    floor.print_floor("table_wise", [one, one], ours)
    wall, cpu = _rows(capsys.readouterr().out)
    assert wall[len(floor.PIECES) :] == ["9.00", "16.0", "1.78x", f"<= {floor.GOAL}x: not met"]
    assert cpu[len(floor.PIECES) :] == ["4.50", "8.0", "1.78x", f"<= {floor.GOAL}x: not met"]
    floor.print_floor("table_wise", [one, one], [(10.0, 5.0, 0.0)])
    assert [r[-1] for r in _rows(capsys.readouterr().out)] == [f"<= {floor.GOAL}x: met"] * 2


def test_the_floor_kernels_compute_the_lookup_and_the_update() -> None:
    """The C loops the floor times do the step's work: a sum-pooled lookup equal to torch's
    `embedding_bag`, a row-wise Adagrad step equal to its formula on the touched rows only."""
    torch = pytest.importorskip("torch")
    lib = floor._kernels()
    if lib is None:
        pytest.skip("no C compiler: the floor times its torch fallbacks")
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 16, generator=g)
    ids = torch.randint(0, 50, (40,), generator=g)
    lengths = torch.tensor([0, 3, 10, 1, 0, 26])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    out = torch.full((6, 16), float("nan"))
    lib.floor_pool(floor._p(weight), floor._p(ids), floor._p(offsets), 6, 16, floor._p(out))
    want = torch.nn.functional.embedding_bag(ids, weight, offsets[:-1], mode="sum")
    torch.testing.assert_close(out, want)

    once = torch.tensor([2, 7, 8, 49])
    block = torch.randn(3, 16, generator=g)  # row i takes block[i % 3]
    grads = block[torch.tensor([0, 1, 2, 0])]
    momentum = torch.rand(50, generator=g)
    w2, m2 = weight.clone(), momentum.clone()
    m2[once] += (grads * grads).mean(1)
    w2[once] -= 0.01 / (m2[once].sqrt() + 1e-8)[:, None] * grads
    args = (floor._p(weight), floor._p(momentum), floor._p(once), floor._p(block))
    lib.floor_update(*args, 4, 3, 16, 0.01, 1e-8)
    torch.testing.assert_close(momentum, m2)
    torch.testing.assert_close(weight, w2)
