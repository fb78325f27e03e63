"""TorchRec's GAUC (session AUC) and XAUC against naive loops over sample pairs, on one process
and over 2 real gloo ranks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from _rec_data import make_metric

from shardrec_metrics.rec.computation import RecMetricException
from shardrec_metrics.rec.gauc import GAUCMetric
from shardrec_metrics.rec.metric_module import RecMetricModule, generate_metric_module
from shardrec_metrics.rec.metrics_config import (
    MetricsConfig,
    RecComputeMode,
    RecMetricDef,
    RecMetricEnum,
    RecTaskInfo,
)
from shardrec_metrics.rec.rec_metric import RecMetric
from shardrec_metrics.rec.xauc import XAUCMetric
from shardrec_testing import RankContext, RankPool

FUSED = RecComputeMode.FUSED_TASKS_COMPUTATION
UNFUSED = RecComputeMode.UNFUSED_TASKS_COMPUTATION
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]  # p, y, w (n_tasks, B); groups


def _batches(seed: int, groups: Sequence[Sequence[int]], n_tasks: int) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for sizes in groups:
        b = sum(sizes)
        p = (torch.rand(n_tasks, b, generator=g, dtype=torch.double) * 6).floor() / 6  # ties
        y = torch.randint(0, 2, (n_tasks, b), generator=g).double()
        w = torch.rand(n_tasks, b, generator=g, dtype=torch.double)
        out.append((p, y, w, list(sizes)))
    return out


def _feed(metric: RecMetric, batch: Batch, mode: RecComputeMode) -> None:
    p, y, w, sizes = batch
    num_candidates = torch.tensor(sizes)
    if mode == UNFUSED:
        split = lambda x: {f"t{i}": x[i] for i in range(x.shape[0])}  # noqa: E731
        metric.update(
            predictions=split(p), labels=split(y), weights=split(w), num_candidates=num_candidates
        )
    else:
        metric.update(predictions=p, labels=y, weights=w, num_candidates=num_candidates)


def _group_aucs(batches: Sequence[Batch], task: int) -> list[float]:
    """Every counted group's AUC by a loop over positive-negative pairs."""
    out = []
    for p, y, _, sizes in batches:
        start = 0
        for n in sizes:
            ps, ys = p[task, start : start + n].tolist(), y[task, start : start + n].tolist()
            start += n
            pos = [a for a, b in zip(ps, ys, strict=True) if b == 1]
            neg = [a for a, b in zip(ps, ys, strict=True) if b == 0]
            if not pos or not neg or len(set(ps)) == 1:
                continue
            won = sum((a > c) + 0.5 * (a == c) for a in pos for c in neg)
            out.append(won / (len(pos) * len(neg)))
    return out


def _gauc(aucs: Sequence[float]) -> float:
    return (sum(aucs) + 1e-9) / (len(aucs) + 2e-9)


def _xauc(batches: Sequence[Batch], task: int) -> float:
    agree = total = 0.0
    for p, y, w, _ in batches:
        ps, ys, ws = p[task].tolist(), y[task].tolist(), w[task].tolist()
        for i in range(len(ps)):
            for j in range(i + 1, len(ps)):
                pair = ws[i] * ws[j]
                total += pair
                same = (ps[i] - ps[j]) * (ys[i] - ys[j]) > 0 or (ps[i] == ps[j] and ys[i] == ys[j])
                agree += pair * same
    return agree / total if total else 0.0


def _window(batches: Sequence[Batch], local: int) -> list[Batch]:
    kept: list[Batch] = []
    for batch in reversed(batches):
        if sum(b[0].shape[1] for b in kept) + batch[0].shape[1] > local:
            break
        kept.insert(0, batch)
    return kept


GROUPS = [[3, 1, 4], [2, 2, 0, 3], [5, 3], [1, 1, 2], [4, 4]]


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("n_tasks", [1, 3])
def test_gauc_and_xauc_match_naive_pair_loops(mode: RecComputeMode, n_tasks: int) -> None:
    data = _batches(11 + n_tasks, GROUPS, n_tasks)
    data[0][2][0, :3] = 0.0  # zero weights: GAUC ignores weights, XAUC drops the pairs
    gauc, xauc = _make(GAUCMetric, n_tasks, mode, 14), _make(XAUCMetric, n_tasks, mode, 14)
    for batch in data:
        _feed(gauc, batch, mode)
        _feed(xauc, batch, mode)
    out = {**gauc.compute(), **xauc.compute()}
    window = _window(data, 14)
    for i in range(n_tasks):
        life, win = _group_aucs(data, i), _group_aucs(window, i)
        assert float(out[f"gauc-t{i}|lifetime_gauc"]) == pytest.approx(_gauc(life), rel=1e-12)
        assert float(out[f"gauc-t{i}|window_gauc"]) == pytest.approx(_gauc(win), rel=1e-12)
        assert float(out[f"gauc-t{i}|lifetime_gauc_num_samples"]) == len(life)
        assert float(out[f"gauc-t{i}|window_gauc_num_samples"]) == len(win)
        assert float(out[f"xauc-t{i}|lifetime_xauc"]) == pytest.approx(_xauc(data, i), rel=1e-12)
        assert float(out[f"xauc-t{i}|window_xauc"]) == pytest.approx(_xauc(window, i), rel=1e-12)


def test_gauc_edge_cases() -> None:
    metric = _make(GAUCMetric, 1, FUSED, 16)
    assert float(metric.compute()["gauc-t0|lifetime_gauc"]) == pytest.approx(0.5)  # no group
    same_preds = torch.tensor([[0.3, 0.3, 0.2, 0.7]])
    metric.update(
        predictions=same_preds,
        labels=torch.tensor([[1.0, 0.0, 1.0, 1.0]]),
        weights=None,
        num_candidates=torch.tensor([2, 2]),  # equal predictions; then one class only
    )
    out = metric.compute()
    assert float(out["gauc-t0|lifetime_gauc_num_samples"]) == 0.0
    with pytest.raises(ValueError, match=r"num_candidates \[2, 1\] .* batch size 4"):
        metric.update(
            predictions=same_preds,
            labels=same_preds,
            weights=None,
            num_candidates=torch.tensor([2, 1]),
        )
    with pytest.raises(RecMetricException, match="num_candidates="):
        metric.update(predictions=same_preds, labels=same_preds, weights=None)


def test_xauc_without_pairs_is_zero_and_generated_by_the_module() -> None:
    config = MetricsConfig(
        rec_tasks=[RecTaskInfo(name="a")],
        rec_metrics={RecMetricEnum.XAUC: RecMetricDef(rec_task_indices=[0], window_size=8)},
    )
    module = generate_metric_module(
        RecMetricModule, config, 4, 1, 0, state_metrics_mapping={}, device="cpu"
    )
    module.update({"label": torch.ones(1), "prediction": torch.ones(1), "weight": torch.ones(1)})
    assert float(module.compute()["xauc-a|lifetime_xauc"]) == 0.0  # one sample: no pair
    p, y, w, _ = _batches(2, [[4]], 1)[0]
    module.update({"label": y[0], "prediction": p[0], "weight": w[0]})
    assert float(module.compute()["xauc-a|window_xauc"]) == pytest.approx(
        _xauc([(p, y, w, [4])], 0)
    )


RANK_GROUPS = {0: [[3, 1], [2, 2], [4]], 1: [[1, 3], [4]]}


def check_ranks(ctx: RankContext, mode_value: int) -> dict[str, float]:
    mode = RecComputeMode(mode_value)
    metrics = [_make(c, 2, mode, 16, ctx.world_size, ctx.rank) for c in (GAUCMetric, XAUCMetric)]
    for batch in _batches(40 + ctx.rank, RANK_GROUPS[ctx.rank], 2):
        for m in metrics:
            _feed(m, batch, mode)
    return {k: float(v) for m in metrics for k, v in m.compute().items()}


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_two_ranks_equal_the_pooled_reference(rank_pool: RankPool, mode: RecComputeMode) -> None:
    got = rank_pool.run(check_ranks, mode.value)[0]
    data = {r: _batches(40 + r, RANK_GROUPS[r], 2) for r in RANK_GROUPS}
    for i in range(2):
        life = [a for r in data for a in _group_aucs(data[r], i)]
        win = [a for r in data for a in _group_aucs(_window(data[r], 8), i)]
        assert got[f"gauc-t{i}|lifetime_gauc"] == pytest.approx(_gauc(life), rel=1e-12)
        assert got[f"gauc-t{i}|window_gauc"] == pytest.approx(_gauc(win), rel=1e-12)
        everyone = [b for r in data for b in data[r]]
        windows = [b for r in data for b in _window(data[r], 8)]
        assert got[f"xauc-t{i}|lifetime_xauc"] == pytest.approx(_xauc(everyone, i), rel=1e-12)
        assert got[f"xauc-t{i}|window_xauc"] == pytest.approx(_xauc(windows, i), rel=1e-12)


def _make(
    cls: type[RecMetric], n_tasks: int, mode: RecComputeMode, window: int, *where: int
) -> RecMetric:
    return make_metric(cls, [f"t{i}" for i in range(n_tasks)], mode, window, *where)
