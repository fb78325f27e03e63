"""TorchRec's ranking and session metrics (GAUC, XAUC, NDCG, session precision and recall)
against naive loops over sample pairs and sessions, on one process and over 2 real gloo ranks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

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
    SessionMetricDef,
)
from shardrec_metrics.rec.ndcg import NDCGMetric, session_ids_to_lengths
from shardrec_metrics.rec.precision_session import PrecisionSessionMetric
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricList
from shardrec_metrics.rec.recall_session import RecallSessionMetric
from shardrec_metrics.rec.xauc import XAUCMetric
from shardrec_testing import RankContext, RankPool

FUSED = RecComputeMode.FUSED_TASKS_COMPUTATION
UNFUSED = RecComputeMode.UNFUSED_TASKS_COMPUTATION
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]  # p, y, w (n_tasks, B); groups

AnyBatch = TypeVar("AnyBatch", bound=tuple[Any, ...])


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
    """Every counted group's weighted AUC by a loop over positive-negative pairs."""
    out = []
    for p, y, w, sizes in batches:
        start = 0
        for n in sizes:
            sl = slice(start, start + n)
            start += n
            group = list(
                zip(p[task, sl].tolist(), y[task, sl].tolist(), w[task, sl].tolist(), strict=True)
            )
            pos = [(a, v) for a, b, v in group if b == 1]
            neg = [(a, v) for a, b, v in group if b == 0]
            pos_w, neg_w = sum(v for _, v in pos), sum(v for _, v in neg)
            if pos_w == 0 or neg_w == 0 or len({a for a, _, _ in group}) == 1:
                continue
            won = sum(v * u * ((a > c) + 0.5 * (a == c)) for a, v in pos for c, u in neg)
            out.append(won / (pos_w * neg_w))
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


def _window(batches: Sequence[AnyBatch], local: int) -> list[AnyBatch]:
    """The most recent whole batches of at most `local` samples."""
    kept: list[AnyBatch] = []
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
    data[0][2][0, :3] = 0.0  # zero weights: group 0 may lose a class; XAUC drops the pairs
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
    before = float(metric.compute()["gauc-t0|lifetime_gauc"])
    empty = torch.zeros(1, 0)
    metric.update(predictions=empty, labels=empty, weights=None, num_candidates=torch.zeros(0))
    assert float(metric.compute()["gauc-t0|lifetime_gauc"]) == before  # an empty batch
    with pytest.raises(ValueError, match=r"num_candidates \[2, 1\] .* batch size 4"):
        metric.update(
            predictions=same_preds,
            labels=same_preds,
            weights=None,
            num_candidates=torch.tensor([2, 1]),
        )
    with pytest.raises(RecMetricException, match="num_candidates="):
        metric.update(predictions=same_preds, labels=same_preds, weights=None)


def test_gauc_through_a_metric_module_takes_num_candidates() -> None:
    gauc = make_metric(GAUCMetric, ["a"], UNFUSED, 16)
    module = RecMetricModule(4, 1, [RecTaskInfo(name="a")], RecMetricList([gauc]))
    data = _batches(9, [[3, 5], [4, 4]], 1)
    for p, y, w, sizes in data:
        module.update(
            {"label": y[0], "prediction": p[0], "weight": w[0]},
            num_candidates=torch.tensor(sizes),
        )
    aucs = _group_aucs(data, 0)
    assert float(module.compute()["gauc-a|lifetime_gauc"]) == pytest.approx(_gauc(aucs))


def _module(metric: RecMetricEnum, task: str, window: int) -> RecMetricModule:
    """A RecMetricModule of `metric` for the one task `task`, from a MetricsConfig."""
    config = MetricsConfig(
        rec_tasks=[RecTaskInfo(name=task)],
        rec_metrics={metric: RecMetricDef(rec_task_indices=[0], window_size=window)},
    )
    return generate_metric_module(
        RecMetricModule, config, 4, 1, 0, state_metrics_mapping={}, device="cpu"
    )


def test_xauc_without_pairs_is_zero_and_generated_by_the_module() -> None:
    module = _module(RecMetricEnum.XAUC, "a", 8)
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


# --- NDCG ------------------------------------------------------------------------------------

NDCGBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # p, y, w, ids


def _ndcg_batches(seed: int, sessions: Sequence[Sequence[int]], n_tasks: int) -> list[NDCGBatch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for lengths in sessions:
        ids = torch.repeat_interleave(torch.arange(len(lengths)) * 7 + seed, torch.tensor(lengths))
        b = int(ids.numel())
        p = (torch.rand(n_tasks, b, generator=g, dtype=torch.double) * 5).floor() / 5  # ties
        y = torch.randint(0, 4, (n_tasks, b), generator=g).double()
        w = torch.rand(n_tasks, b, generator=g, dtype=torch.double)
        out.append((p, y, w, ids))
    return out


def _session_loss(p: list[float], y: list[float], exp_gain: bool) -> float:
    gain = [2**v - 1 if exp_gain else v for v in y]

    def dcg(scores: list[float]) -> float:
        order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties in order
        return sum(gain[i] / math.log2(r + 2) for r, i in enumerate(order))

    return 1 - dcg(p) / max(dcg(y), 1e-6)


def _ndcg(batches: Sequence[NDCGBatch], task: int, exp_gain: bool) -> float:
    losses = []
    for p, y, w, ids in batches:
        start = 0
        for n in session_lengths_by_hand(ids.tolist()):
            sl = slice(start, start + n)
            start += n
            loss = _session_loss(p[task, sl].tolist(), y[task, sl].tolist(), exp_gain)
            losses.append(loss * max(w[task, sl].tolist()))
    return sum(losses) / len(losses)


def session_lengths_by_hand(ids: list[int]) -> list[int]:
    out: list[int] = []
    for i, v in enumerate(ids):
        if i and v == ids[i - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


def _feed_ndcg(
    metric: NDCGMetric, batch: NDCGBatch, mode: RecComputeMode, key: str = "session_id"
) -> None:
    p, y, w, ids = batch
    if mode == UNFUSED:
        split = lambda x: {f"t{i}": x[i] for i in range(x.shape[0])}  # noqa: E731
        metric.update(
            predictions=split(p), labels=split(y), weights=split(w), required_inputs={key: ids}
        )
    else:
        metric.update(predictions=p, labels=y, weights=w, required_inputs={key: ids})


def _make_ndcg(
    n_tasks: int, mode: RecComputeMode, window: int, *where: int, **kw: object
) -> NDCGMetric:
    tasks = [f"t{i}" for i in range(n_tasks)]
    metric = make_metric(NDCGMetric, tasks, mode, window, *where, **kw)
    assert isinstance(metric, NDCGMetric)
    return metric


NDCG_SESSIONS = [[3, 1, 4], [2, 2, 3], [5, 3], [1, 1, 2], [4, 4]]


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("n_tasks", [1, 2])
@pytest.mark.parametrize("exp_gain", [False, True])
def test_ndcg_matches_a_naive_session_loop(
    mode: RecComputeMode, n_tasks: int, exp_gain: bool
) -> None:
    data = _ndcg_batches(5 + n_tasks, NDCG_SESSIONS, n_tasks)
    data[1][2][0, :4] = 0.0  # a session of zero weight: loss 0, still counted
    metric = _make_ndcg(n_tasks, mode, 14, exponential_gain=exp_gain, session_key="sid")
    assert metric.get_required_inputs() == {"sid"}
    for batch in data:
        _feed_ndcg(metric, batch, mode, "sid")
    out = metric.compute()
    for i in range(n_tasks):
        life, win = _ndcg(data, i, exp_gain), _ndcg(_window(data, 14), i, exp_gain)
        assert float(out[f"ndcg-t{i}|lifetime_ndcg"]) == pytest.approx(life, rel=1e-12)
        assert float(out[f"ndcg-t{i}|window_ndcg"]) == pytest.approx(win, rel=1e-12)


def test_session_lengths_and_bad_inputs() -> None:
    ids = torch.tensor([4, 4, 1, 4, 4, 4])
    assert session_ids_to_lengths(ids).tolist() == session_lengths_by_hand(ids.tolist())
    assert session_ids_to_lengths(torch.zeros(0)).tolist() == []
    metric = _make_ndcg(2, FUSED, 16)
    x = torch.rand(2, 4)
    with pytest.raises(RecMetricException, match="'session_id'"):
        metric.update(predictions=x, labels=x, weights=x)
    with pytest.raises(ValueError, match=r"session ids of shape \(3,\)"):
        metric.update(predictions=x, labels=x, weights=x, required_inputs={"session_id": ids[:3]})


def test_generated_module_passes_session_ids() -> None:
    module = _module(RecMetricEnum.NDCG, "t0", 100)
    data = _ndcg_batches(3, [[2, 3], [4]], 1)
    for p, y, w, ids in data:
        module.update({"label": y[0], "prediction": p[0], "weight": w[0], "session_id": ids})
    assert float(module.compute()["ndcg-t0|lifetime_ndcg"]) == pytest.approx(
        _ndcg(data, 0, False), rel=1e-12
    )


NDCG_RANK_SESSIONS = {0: [[3, 1], [2, 2], [4]], 1: [[1, 3], [4]]}


def check_ndcg_ranks(ctx: RankContext, mode_value: int) -> dict[str, float]:
    mode = RecComputeMode(mode_value)
    metric = _make_ndcg(2, mode, 16, ctx.world_size, ctx.rank)
    for batch in _ndcg_batches(60 + ctx.rank, NDCG_RANK_SESSIONS[ctx.rank], 2):
        _feed_ndcg(metric, batch, mode)
    return {k: float(v) for k, v in metric.compute().items()}


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_ndcg_over_two_ranks_equals_the_pooled_reference(
    rank_pool: RankPool, mode: RecComputeMode
) -> None:
    got = rank_pool.run(check_ndcg_ranks, mode.value)[0]
    data = {r: _ndcg_batches(60 + r, NDCG_RANK_SESSIONS[r], 2) for r in NDCG_RANK_SESSIONS}
    everyone = [b for r in data for b in data[r]]
    windows = [b for r in data for b in _window(data[r], 8)]
    for i in range(2):
        assert got[f"ndcg-t{i}|lifetime_ndcg"] == pytest.approx(
            _ndcg(everyone, i, False), rel=1e-12
        )
        assert got[f"ndcg-t{i}|window_ndcg"] == pytest.approx(_ndcg(windows, i, False), rel=1e-12)


# --- session-level precision and recall ------------------------------------------------------

SessionBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # p, y, w, ids (1, B)


def _session_batches(seed: int, sizes: Sequence[int], graded: bool) -> list[SessionBatch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in sizes:
        p = (torch.rand(1, b, generator=g, dtype=torch.double) * 4).floor() / 4  # ties
        y = torch.randint(0, 3 if graded else 2, (1, b), generator=g).double()
        w = torch.rand(1, b, generator=g, dtype=torch.double)
        out.append((p, y, w, torch.randint(0, 3, (1, b), generator=g)))  # ids need not be runs
    return out


def _session_counts(batches: Sequence[SessionBatch], k: int, rank_labels: bool) -> list[float]:
    """[TP, FP, FN] by a loop over samples and their sessions."""
    tp = fp = fn = 0.0
    for p, y, w, ids in batches:
        ps, ys, ws, ss = (x[0].tolist() for x in (p, y, w, ids))
        for i in range(len(ps)):
            mates = [j for j in range(len(ps)) if ss[j] == ss[i]]
            predicted = sum(ps[j] > ps[i] for j in mates) < k
            label = float(sum(ys[j] > ys[i] for j in mates) < k) if rank_labels else ys[i]
            tp += ws[i] * label * predicted
            fp += ws[i] * (1 - label) * predicted
            fn += ws[i] * label * (not predicted)
    return [tp, fp, fn]


def _nan_ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def _make_session(
    cls: type[RecMetric], k: int, rank_labels: bool, window: int, *where: int
) -> RecMetric:
    definition = SessionMetricDef(
        session_var_name="sid", top_threshold=k, run_ranking_of_labels=rank_labels
    )
    return cls(
        world_size=where[0] if where else 1,
        my_rank=where[1] if where else 0,
        batch_size=4,
        tasks=[RecTaskInfo(name="s", session_metric_def=definition)],
        window_size=window,
    )


def _feed_session(metric: RecMetric, batch: SessionBatch) -> None:
    p, y, w, ids = batch
    one = lambda x: {"s": x[0]}  # noqa: E731
    metric.update(
        predictions=one(p), labels=one(y), weights=one(w), required_inputs={"sid": ids[0]}
    )


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("rank_labels", [False, True])
def test_session_precision_and_recall_match_a_sample_loop(k: int, rank_labels: bool) -> None:
    data = _session_batches(70 + k, [4, 3, 4, 2, 4], graded=rank_labels)
    precision = _make_session(PrecisionSessionMetric, k, rank_labels, 9)
    recall = _make_session(RecallSessionMetric, k, rank_labels, 9)
    assert precision.get_required_inputs() == {"sid"}
    for batch in data:
        _feed_session(precision, batch)
        _feed_session(recall, batch)
    out = {**precision.compute(), **recall.compute()}
    for prefix, batches in (("lifetime", data), ("window", _window(data, 9))):
        tp, fp, fn = _session_counts(batches, k, rank_labels)
        got = float(out[f"precision_session_level-s|{prefix}_precision_session_level"])
        assert got == pytest.approx(_nan_ratio(tp, tp + fp), rel=1e-12)
        got = float(out[f"recall_session_level-s|{prefix}_recall_session_level"])
        assert got == pytest.approx(_nan_ratio(tp, tp + fn), rel=1e-12)


def test_session_metrics_refuse_what_they_cannot_do() -> None:
    task = RecTaskInfo(name="s", session_metric_def=SessionMetricDef(session_var_name="sid"))
    kw: dict[str, object] = {"world_size": 1, "my_rank": 0, "batch_size": 4}
    for cls in (PrecisionSessionMetric, RecallSessionMetric):
        with pytest.raises(RecMetricException, match="top_threshold"):
            cls(**kw, tasks=[task])  # type: ignore[arg-type]
        with pytest.raises(RecMetricException, match="session_metric_def"):
            cls(**kw, tasks=[RecTaskInfo(name="s")])  # type: ignore[arg-type]
        with pytest.raises(RecMetricException, match="Fused computation"):
            cls(**kw, tasks=[task], compute_mode=FUSED)  # type: ignore[arg-type]
        with pytest.raises(RecMetricException, match="Fused update"):
            cls(**kw, tasks=[task], fused_update_limit=2)  # type: ignore[arg-type]
    metric = _make_session(RecallSessionMetric, 1, False, 8)
    x = {"s": torch.rand(4)}
    with pytest.raises(RecMetricException, match="'sid'"):
        metric.update(predictions=x, labels=x, weights=x)
    with pytest.raises(ValueError, match="required input 'sid' has 3 values for a batch of 4"):
        metric.update(predictions=x, labels=x, weights=x, required_inputs={"sid": torch.ones(3)})
    metric.update(
        predictions=x,
        labels={"s": torch.zeros(4)},
        weights=x,
        required_inputs={"sid": torch.ones(4)},
    )
    assert math.isnan(
        float(metric.compute()["recall_session_level-s|lifetime_recall_session_level"])
    )


def check_session_ranks(ctx: RankContext) -> dict[str, float]:
    metrics = [
        _make_session(c, 2, False, 16, ctx.world_size, ctx.rank)
        for c in (PrecisionSessionMetric, RecallSessionMetric)
    ]
    for batch in _session_batches(80 + ctx.rank, [4, 3, 4] if ctx.rank else [4], False):
        for m in metrics:
            _feed_session(m, batch)
    return {k: float(v) for m in metrics for k, v in m.compute().items()}


def test_session_metrics_over_two_ranks_equal_the_pooled_reference(rank_pool: RankPool) -> None:
    got = rank_pool.run(check_session_ranks)[0]
    data = {r: _session_batches(80 + r, [4, 3, 4] if r else [4], False) for r in (0, 1)}
    everyone = [b for r in data for b in data[r]]
    windows = [b for r in data for b in _window(data[r], 8)]
    for prefix, batches in (("lifetime", everyone), ("window", windows)):
        tp, fp, fn = _session_counts(batches, 2, False)
        got_p = got[f"precision_session_level-s|{prefix}_precision_session_level"]
        assert got_p == pytest.approx(tp / (tp + fp), rel=1e-12)
        assert got[f"recall_session_level-s|{prefix}_recall_session_level"] == pytest.approx(
            tp / (tp + fn), rel=1e-12
        )
