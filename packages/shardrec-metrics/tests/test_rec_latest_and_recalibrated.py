"""TorchRec's recalibrated NE and calibration, scalar, output, segmented NE, hindsight target
PR and multi-label precision against naive per-sample loops, on one process and over 2 real
gloo ranks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import _rec_reference as ref
import pytest
import torch
from _rec_data import make_metric as _make
from _rec_data import random_batches

from shardrec_metrics.rec import (
    MetricsConfig,
    RecComputeMode,
    RecMetricDef,
    RecMetricEnum,
    RecMetricModule,
    RecTaskInfo,
    generate_metric_module,
)
from shardrec_metrics.rec.calibration_with_recalibration import RecalibratedCalibrationMetric
from shardrec_metrics.rec.computation import RecMetricException
from shardrec_metrics.rec.hindsight_target_pr import HindsightTargetPRMetric
from shardrec_metrics.rec.multi_label_precision import MultiLabelPrecisionMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.ne_with_recalibration import RecalibratedNEMetric
from shardrec_metrics.rec.output import OutputMetric
from shardrec_metrics.rec.rec_metric import RecMetric
from shardrec_metrics.rec.scalar import ScalarMetric
from shardrec_metrics.rec.segmented_ne import GroupingKeyConfig, SegmentedNEMetric
from shardrec_testing import RankContext, RankPool

FUSED = RecComputeMode.FUSED_TASKS_COMPUTATION
UNFUSED = RecComputeMode.UNFUSED_TASKS_COMPUTATION
Data = dict[str, list[ref.Batch]]


def _data(seed: int, sizes: Sequence[int], tasks: Sequence[str]) -> Data:
    return random_batches(seed, sizes, tasks)


def _feed(metric: RecMetric, data: Data, mode: RecComputeMode, i: int, **kw: object) -> None:
    tasks = list(data)
    cols = {t: torch.tensor(data[t][i], dtype=torch.double).reshape(-1, 3).T for t in tasks}
    p, y, w = ({t: cols[t][k] for t in tasks} for k in range(3))
    if mode == UNFUSED:
        metric.update(predictions=p, labels=y, weights=w, **kw)
    else:
        stack = lambda d: torch.stack([d[t] for t in tasks])  # noqa: E731
        metric.update(predictions=stack(p), labels=stack(y), weights=stack(w), **kw)


def _feed_all(metric: RecMetric, data: Data, mode: RecComputeMode) -> None:
    for i in range(len(next(iter(data.values())))):
        _feed(metric, data, mode, i)


def _recalibrated(samples: Sequence[ref.Sample], c: float) -> list[ref.Sample]:
    return [(p / (p + (1 - p) / c), y, w) for p, y, w in samples]


RECALIBRATED = {
    "recalibrated_ne": (RecalibratedNEMetric, "ne", ref.ne),
    "recalibrated_calibration": (RecalibratedCalibrationMetric, "calibration", ref.calibration),
}


@pytest.mark.parametrize("name", sorted(RECALIBRATED))
@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("coefficient", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
def test_recalibrated_metrics_match_a_naive_loop(
    name: str, mode: RecComputeMode, coefficient: float, tasks: list[str]
) -> None:
    cls, metric_name, formula = RECALIBRATED[name]
    data = _data(7 + len(tasks), [4, 3, 4, 2], tasks)
    data[tasks[0]][1][0] = (*data[tasks[0]][1][0][:2], 0.0)  # a zero weight
    metric = _make(cls, tasks, mode, window=7, recalibration_coefficient=coefficient)
    _feed_all(metric, data, mode)
    out = metric.compute()
    for t in tasks:
        everything = _recalibrated([s for b in data[t] for s in b], coefficient)
        window = _recalibrated([s for b in ref.window_batches(data[t], 7) for s in b], coefficient)
        for prefix, samples in (("lifetime", everything), ("window", window)):
            key = f"{name}-{t}|{prefix}_{metric_name}"
            assert float(out[key]) == pytest.approx(formula(samples), rel=1e-9), key


def test_recalibrated_ne_includes_logloss_and_coefficient_one_is_plain_ne() -> None:
    data = _data(3, [4, 4], ["a", "b"])
    plain = _make(NEMetric, ["a", "b"], FUSED, 8)
    same = _make(RecalibratedNEMetric, ["a", "b"], FUSED, 8, include_logloss=True)
    _feed_all(plain, data, FUSED)
    _feed_all(same, data, FUSED)
    a, b = plain.compute(), same.compute()
    for t in "ab":
        assert float(b[f"recalibrated_ne-{t}|window_ne"]) == pytest.approx(
            float(a[f"ne-{t}|window_ne"]), rel=1e-12
        )
        samples = [s for batch in data[t] for s in batch]
        assert float(b[f"recalibrated_ne-{t}|lifetime_logloss"]) == pytest.approx(
            ref.logloss(samples), rel=1e-9
        )


@pytest.mark.parametrize("bad", [0.0, -0.5, math.nan, math.inf])
def test_a_bad_recalibration_coefficient_is_refused(bad: float) -> None:
    for cls in (RecalibratedNEMetric, RecalibratedCalibrationMetric):
        with pytest.raises(ValueError, match=f"recalibration_coefficient .*got {bad}"):
            _make(cls, ["a"], UNFUSED, 8, recalibration_coefficient=bad)


def test_recalibrated_metrics_zero_weights_and_empty_batches() -> None:
    metric = _make(
        RecalibratedNEMetric,
        ["a", "b"],
        FUSED,
        8,
        recalibration_coefficient=0.5,
        allow_missing_label_with_zero_weight=True,
    )
    p = torch.tensor([[0.2, 0.7], [0.4, 0.9]], dtype=torch.double)
    y = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.double)
    w = torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=torch.double)  # task b: no weight
    metric.update(predictions=p, labels=y, weights=w)
    before = metric.compute()
    empty = torch.zeros((2, 0), dtype=torch.double)
    metric.update(predictions=empty, labels=empty, weights=empty)
    after = metric.compute()
    samples = _recalibrated([(0.2, 0.0, 1.0), (0.7, 1.0, 2.0)], 0.5)
    assert float(after["recalibrated_ne-a|lifetime_ne"]) == pytest.approx(ref.ne(samples))
    assert float(after["recalibrated_ne-b|lifetime_ne"]) == ref.ETA  # TorchRec's missing label
    assert {k: float(v) for k, v in before.items()} == {k: float(v) for k, v in after.items()}


def _scalar_reference(batches: list[ref.Batch], window: int) -> tuple[float, float]:
    means = [sum(y for _, y, _ in b) / len(b) for b in batches if b]
    kept = [sum(y for _, y, _ in b) / len(b) for b in ref.window_batches(batches, window) if b]
    return means[-1], sum(kept) / len(kept)


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
def test_scalar_is_the_latest_batch_mean_and_the_window_mean_of_batch_means(
    mode: RecComputeMode, tasks: list[str]
) -> None:
    data = _data(21, [4, 3, 4, 2, 4], tasks)
    metric = _make(ScalarMetric, tasks, mode, window=9)
    assert all(float(v) == 0.0 for v in metric.compute().values())  # no batch yet
    _feed_all(metric, data, mode)
    out = metric.compute()
    for t in tasks:
        lifetime, window = _scalar_reference(data[t], 9)
        assert float(out[f"scalar-{t}|lifetime_scalar"]) == pytest.approx(lifetime, rel=1e-12)
        assert float(out[f"scalar-{t}|window_scalar"]) == pytest.approx(window, rel=1e-12)
    _feed(metric, {t: [[]] for t in tasks}, mode, 0)  # an empty batch changes nothing
    assert {k: float(v) for k, v in metric.compute().items()} == {
        k: float(v) for k, v in out.items()
    }


def _output_module(tasks: list[str]) -> RecMetricModule:
    config = MetricsConfig(
        rec_tasks=[RecTaskInfo(name=t, label_name=f"l{t}", prediction_name=f"p{t}") for t in tasks],
        rec_metrics={
            RecMetricEnum.OUTPUT: RecMetricDef(rec_task_indices=list(range(len(tasks)))),
            RecMetricEnum.SCALAR: RecMetricDef(rec_task_indices=[0], window_size=8),
            RecMetricEnum.RECALIBRATED_NE: RecMetricDef(
                rec_task_indices=[0], arguments={"recalibration_coefficient": 0.25}
            ),
            RecMetricEnum.RECALIBRATED_CALIBRATION: RecMetricDef(rec_task_indices=[0]),
        },
    )
    return generate_metric_module(
        RecMetricModule, config, 4, 1, 0, state_metrics_mapping={}, device="cpu"
    )


@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
def test_generated_module_feeds_output_its_required_inputs(tasks: list[str]) -> None:
    module = _output_module(tasks)
    assert set(module.get_required_inputs() or []) >= {"latest_imp", "total_latest_imp"}
    g = torch.Generator().manual_seed(4)
    last: dict[str, torch.Tensor] = {}
    batches = []
    for _ in range(3):
        out = {k: torch.rand(4, generator=g, dtype=torch.double) for k in ("latest_imp",)}
        out["total_latest_imp"] = torch.randint(0, 9, (4,), generator=g).double()
        for t in tasks:
            out[f"l{t}"] = torch.randint(0, 2, (4,), generator=g).double()
            out[f"p{t}"] = torch.rand(4, generator=g, dtype=torch.double)
            out["weight"] = torch.ones(4, dtype=torch.double)
        module.update(out)
        batches.append(out)
        last = out
    got = module.compute()
    for t in tasks:
        for name in ("latest_imp", "total_latest_imp"):
            expected = sum(last[name].tolist()) / 4
            assert float(got[f"output-{t}|output_{name}"]) == pytest.approx(expected), name
    a = [(float(p), float(y), 1.0) for b in batches for p, y in zip(b["pa"], b["la"], strict=True)]
    assert float(got["recalibrated_ne-a|lifetime_ne"]) == pytest.approx(
        ref.ne(_recalibrated(a, 0.25)), rel=1e-9
    )
    assert float(got["recalibrated_calibration-a|lifetime_calibration"]) == pytest.approx(
        ref.calibration(a), rel=1e-9
    )
    assert float(got["scalar-a|lifetime_scalar"]) == pytest.approx(float(last["la"].mean()))


def test_output_without_its_inputs_is_refused() -> None:
    metric = _make(OutputMetric, ["a", "b"], FUSED, 8)
    x = torch.rand(2, 4)
    with pytest.raises(RecMetricException, match="missing \\['total_latest_imp'\\]"):
        metric.update(predictions=x, labels=x, weights=None, required_inputs={"latest_imp": x[0]})
    with pytest.raises(ValueError, match="'latest_imp' has shape \\(3, 4\\)"):
        metric.update(
            predictions=x,
            labels=x,
            weights=None,
            required_inputs={"latest_imp": torch.rand(3, 4), "total_latest_imp": x},
        )


def _keys(data: Data, i: int) -> torch.Tensor:
    """Segment index of every sample of batch i: its position modulo 3."""
    return torch.arange(len(next(iter(data.values()))[i])) % 3


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
@pytest.mark.parametrize("float_keys", [False, True])
def test_segmented_ne_is_ne_per_segment(
    mode: RecComputeMode, tasks: list[str], float_keys: bool
) -> None:
    data = _data(31, [4, 3, 4, 1], tasks)
    data[tasks[0]][0][0] = (*data[tasks[0]][0][0][:2], 0.0)  # a zero weight
    kw = {"grouping_keys": "seg", "cast_keys_to_int": True} if float_keys else {}
    metric = _make(SegmentedNEMetric, tasks, mode, 8, num_groups=4, include_logloss=True, **kw)
    name = "seg" if float_keys else "grouping_keys"
    assert metric.get_required_inputs() == {name}
    for i in range(4):
        keys = _keys(data, i).double() if float_keys else _keys(data, i)
        _feed(metric, data, mode, i, required_inputs={name: keys})
    out = metric.compute()
    assert all(v.dim() == 0 for v in out.values())  # one 0-d value per key in every mode (TorchRec)
    for t in tasks:
        window = ref.window_batches(data[t], 8)
        for g in range(3):
            for prefix, batches in (("lifetime", data[t]), ("window", window)):
                segment = [s for b in batches for s in b[g::3]]
                got = float(out[f"segmented_ne-{t}|{prefix}_segmented_ne_{g}"])
                assert got == pytest.approx(ref.ne(segment), rel=1e-9)
                got = float(out[f"segmented_ne-{t}|{prefix}_logloss_{g}"])
                assert got == pytest.approx(ref.logloss(segment), rel=1e-9)
        assert math.isnan(float(out[f"segmented_ne-{t}|lifetime_segmented_ne_3"]))  # no sample


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_segmented_ne_with_several_grouping_keys(mode: RecComputeMode) -> None:
    data = _data(33, [4, 3, 4], ["a", "b"])
    keys = ["k1", {"name": "k2", "num_groups": 2}, GroupingKeyConfig(name="k3", num_groups=1)]
    metric = _make(SegmentedNEMetric, ["a", "b"], mode, 8, num_groups=3, grouping_keys=keys)
    assert metric.get_required_inputs() == {"k1", "k2", "k3"}
    for i in range(3):
        size = len(data["a"][i])
        inputs = {"k1": torch.arange(size) % 3, "k2": torch.arange(size) % 2}
        _feed(metric, data, mode, i, required_inputs={**inputs, "k3": torch.zeros(size).long()})
    out = metric.compute()
    for t in "ab":
        for key, count in (("k1", 3), ("k2", 2), ("k3", 1)):
            for g in range(count):
                segment = [s for b in data[t] for s in b[g::count]]
                got = float(out[f"segmented_ne-{t}|lifetime_segmented_ne_{g}@{key}"])
                assert got == pytest.approx(ref.ne(segment), rel=1e-9), (t, key, g)


def test_segmented_ne_refuses_bad_keys() -> None:
    with pytest.raises(ValueError, match="num_groups must be an int >= 1, got 0"):
        _make(SegmentedNEMetric, ["a"], FUSED, 8, num_groups=0)
    with pytest.raises(ValueError, match="distinct inputs"):
        _make(SegmentedNEMetric, ["a"], FUSED, 8, grouping_keys=["k1", "k1"])
    with pytest.raises(ValueError, match="num_groups must be an int >= 1, got 0"):
        GroupingKeyConfig(name="k", num_groups=0)
    metric = _make(SegmentedNEMetric, ["a"], FUSED, 8, num_groups=2)
    x = torch.rand(1, 4)
    for keys, error in (
        (None, RecMetricException),
        (torch.tensor([0, 1, 0, 1], dtype=torch.int32), RecMetricException),
        (torch.tensor([0, 1, 2, 1]), ValueError),
        (torch.tensor([0, 1, 1]), ValueError),
    ):
        with pytest.raises(error, match="grouping_keys"):
            metric.update(
                predictions=x, labels=x, weights=x, required_inputs={"grouping_keys": keys}
            )


THRESHOLDS = torch.linspace(0, 1, 1000).double().tolist()  # TorchRec's grid


def _hindsight(samples: Sequence[ref.Sample], target: float) -> tuple[float, float, float]:
    """(index, precision, recall) at the first threshold whose precision reaches `target`."""
    rows = []
    for t in THRESHOLDS:
        tp = sum(w * y for p, y, w in samples if p >= t)
        fp = sum(w * (1 - y) for p, y, w in samples if p >= t)
        fn = sum(w * y for p, y, w in samples if p <= t)
        rows.append((tp / (tp + fp) if tp + fp else 0.0, tp / (tp + fn) if tp + fn else 0.0))
    idx = next((i for i, (prec, _) in enumerate(rows) if prec >= target), len(rows) - 1)
    return float(idx), rows[idx][0], rows[idx][1]


def _hindsight_keys(t: str, prefix: str) -> list[str]:
    return [
        f"hindsight_target_pr-{t}|{prefix}_hindsight_target_{name}"
        for name in ("pr", "precision", "recall")
    ]


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
@pytest.mark.parametrize("target", [0.0, 0.6, 0.9])
def test_hindsight_target_pr_matches_a_threshold_loop(
    mode: RecComputeMode, tasks: list[str], target: float
) -> None:
    data = _data(41, [4, 3, 4], tasks)
    data[tasks[0]][0][0] = (*data[tasks[0]][0][0][:2], 0.0)  # a zero weight
    metric = _make(HindsightTargetPRMetric, tasks, mode, 8, target_precision=target)
    _feed_all(metric, data, mode)
    out = metric.compute()
    for t in tasks:
        everything = [s for b in data[t] for s in b]
        window = [s for b in ref.window_batches(data[t], 8) for s in b]
        for prefix, samples in (("lifetime", everything), ("window", window)):
            expected = _hindsight(samples, target)
            got = tuple(float(out[k]) for k in _hindsight_keys(t, prefix))
            assert got == pytest.approx(expected, rel=1e-12), (t, prefix)


def test_hindsight_target_pr_without_positives_and_bad_target() -> None:
    metric = _make(HindsightTargetPRMetric, ["a"], FUSED, 8)
    x = torch.rand(1, 4)
    metric.update(predictions=x, labels=torch.zeros(1, 4), weights=None)
    got = [float(metric.compute()[k]) for k in _hindsight_keys("a", "lifetime")]
    assert got == [999.0, 0.0, 0.0]  # no threshold reaches the target: the last one
    metric = _make(HindsightTargetPRMetric, ["a"], FUSED, 8, target_precision=0.0)
    p = torch.tensor([[0.0, 0.5, 0.7, 1.0]])  # 0 and 1 lie on thresholds
    metric.update(predictions=p, labels=torch.tensor([[1.0, 1.0, 0.0, 1.0]]), weights=None)
    got = [float(metric.compute()[k]) for k in _hindsight_keys("a", "lifetime")]
    assert got == [0.0, 0.75, 0.75]  # FN counts p <= threshold (TorchRec's), here p = 0
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="target_precision must be in"):
            _make(HindsightTargetPRMetric, ["a"], FUSED, 8, target_precision=bad)


def _as_bits(data: Data) -> Data:
    """The samples as 3-label bit sets: prediction floor(8 p), label floor(8 w), weight y + 0.5."""
    return {
        t: [[(float(int(8 * p)), float(int(8 * w)), y + 0.5) for p, y, w in b] for b in batches]
        for t, batches in data.items()
    }


def _label_precision(samples: Sequence[ref.Sample], bit: int) -> float:
    on = [(int(y) >> bit & 1, w) for p, y, w in samples if int(p) >> bit & 1]
    tp, fp = sum(w for hit, w in on if hit), sum(w for hit, w in on if not hit)
    return tp / (tp + fp) if tp + fp else 0.0


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
@pytest.mark.parametrize("tasks", [["a"], ["a", "b"]])
def test_multi_label_precision_per_bit_matches_a_loop(
    mode: RecComputeMode, tasks: list[str]
) -> None:
    data = _as_bits(_data(51, [4, 3, 4, 2], tasks))
    names = ["cat", "dog", "owl", "bee"]  # bit 3 is never predicted: precision 0
    metric = _make(MultiLabelPrecisionMetric, tasks, mode, 7, num_labels=4, label_names=names)
    _feed_all(metric, data, mode)
    out = metric.compute()
    for t in tasks:
        everything = [s for b in data[t] for s in b]
        window = [s for b in ref.window_batches(data[t], 7) for s in b]
        for bit, name in enumerate(names):
            for prefix, samples in (("lifetime", everything), ("window", window)):
                key = f"multi_label_precision-{t}|{prefix}_multi_label_precision{name}"
                assert float(out[key]) == pytest.approx(_label_precision(samples, bit), rel=1e-12)


def test_multi_label_precision_refuses_bad_inputs() -> None:
    with pytest.raises(ValueError, match="num_labels must be an int >= 1, got 0"):
        _make(MultiLabelPrecisionMetric, ["a"], FUSED, 8, num_labels=0)
    with pytest.raises(ValueError, match="label_names has 1 names for num_labels=2"):
        _make(MultiLabelPrecisionMetric, ["a"], FUSED, 8, num_labels=2, label_names=["x"])
    metric = _make(MultiLabelPrecisionMetric, ["a"], FUSED, 8, num_labels=2)
    for bad in ([[1.0, 2.5, 0.0, 3.0]], [[1.0, -1.0, 0.0, 3.0]]):
        with pytest.raises(ValueError, match="integers >= 0"):
            metric.update(predictions=torch.tensor(bad), labels=torch.ones(1, 4), weights=None)
    metric.update(
        predictions=torch.tensor([[1.0, 0, 3, 2]]),
        labels=torch.tensor([[3.0, 0, 1, 0]]),
        weights=None,
    )
    out = metric.compute()  # bit 0: 1->3 hit, 3->1 hit; bit 1: 3->1 miss, 2->0 miss
    assert float(out["multi_label_precision-a|lifetime_multi_label_precisionlabel_0"]) == 1.0
    assert float(out["multi_label_precision-a|lifetime_multi_label_precisionlabel_1"]) == 0.0


# --- 2 real gloo ranks: values equal the pooled reference --------------------------------

WINDOW = 16  # global: 8 samples per rank
BATCHES = {0: [4, 4, 3, 4], 1: [4, 2]}
TASKS = ["a", "b"]


def _rank_inputs(rank: int) -> tuple[Data, list[float]]:
    imps = [float(10 * rank + i) for i in range(len(BATCHES[rank]))]
    return _data(300 + rank, BATCHES[rank], TASKS), imps


def check_pooled(ctx: RankContext, mode_value: int) -> dict[str, float]:
    mode = RecComputeMode(mode_value)
    kw = {"world": ctx.world_size, "rank": ctx.rank}
    metrics = [
        _make(RecalibratedNEMetric, TASKS, mode, WINDOW, recalibration_coefficient=0.3, **kw),
        _make(RecalibratedCalibrationMetric, TASKS, mode, WINDOW, **kw),
        _make(ScalarMetric, TASKS, mode, WINDOW, **kw),
        _make(OutputMetric, TASKS, mode, WINDOW, **kw),
        _make(SegmentedNEMetric, TASKS, mode, WINDOW, num_groups=3, include_logloss=True, **kw),
        _make(HindsightTargetPRMetric, TASKS, mode, WINDOW, target_precision=0.6, **kw),
        _make(MultiLabelPrecisionMetric, TASKS, mode, WINDOW, num_labels=3, **kw),
    ]
    data, imps = _rank_inputs(ctx.rank)
    for i, imp in enumerate(imps):
        for m in metrics[:3]:
            _feed(m, data, mode, i)
        _feed(metrics[4], data, mode, i, required_inputs={"grouping_keys": _keys(data, i)})
        _feed(metrics[5], data, mode, i)
        _feed(metrics[6], _as_bits(data), mode, i)
        x = torch.full((2, 4) if mode == FUSED else (4,), imp)
        inputs = {"latest_imp": x, "total_latest_imp": 2 * x}
        p = {t: torch.rand(4) for t in TASKS}
        if mode == FUSED:
            metrics[3].update(predictions=x, labels=x, weights=None, required_inputs=inputs)
        else:
            metrics[3].update(predictions=p, labels=p, weights=None, required_inputs=inputs)
    out: dict[str, float] = {}
    for m in metrics:
        out.update({k: float(v) for k, v in m.compute().items()})
    return out


@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_two_ranks_equal_the_pooled_reference(rank_pool: RankPool, mode: RecComputeMode) -> None:
    got = rank_pool.run(check_pooled, mode.value)[0]
    inputs = {r: _rank_inputs(r) for r in BATCHES}
    local = WINDOW // len(BATCHES)
    for t in TASKS:
        everyone = [s for r in inputs for b in inputs[r][0][t] for s in b]
        window = [s for r in inputs for b in ref.window_batches(inputs[r][0][t], local) for s in b]
        exp = {
            "recalibrated_ne-{}|lifetime_ne": ref.ne(_recalibrated(everyone, 0.3)),
            "recalibrated_ne-{}|window_ne": ref.ne(_recalibrated(window, 0.3)),
            "recalibrated_calibration-{}|lifetime_calibration": ref.calibration(everyone),
            "recalibrated_calibration-{}|window_calibration": ref.calibration(window),
        }
        latest = [_scalar_reference(inputs[r][0][t], local)[0] for r in inputs]
        exp["scalar-{}|lifetime_scalar"] = sum(latest) / len(latest)
        kept = [b for r in inputs for b in ref.window_batches(inputs[r][0][t], local)]
        exp["scalar-{}|window_scalar"] = sum(sum(y for _, y, _ in b) / len(b) for b in kept) / len(
            kept
        )
        exp["output-{}|output_latest_imp"] = sum(inputs[r][1][-1] for r in inputs)
        exp["output-{}|output_total_latest_imp"] = 2 * sum(inputs[r][1][-1] for r in inputs)
        for g in range(3):
            segment = [s for r in inputs for b in inputs[r][0][t] for s in b[g::3]]
            exp[f"segmented_ne-{{}}|lifetime_segmented_ne_{g}"] = ref.ne(segment)
            exp[f"segmented_ne-{{}}|lifetime_logloss_{g}"] = ref.logloss(segment)
            segment = [
                s
                for r in inputs
                for b in ref.window_batches(inputs[r][0][t], local)
                for s in b[g::3]
            ]
            exp[f"segmented_ne-{{}}|window_segmented_ne_{g}"] = ref.ne(segment)
        for prefix, samples in (("lifetime", everyone), ("window", window)):
            keys = _hindsight_keys("{}", prefix)
            exp.update(zip(keys, _hindsight(samples, 0.6), strict=True))
            bits = _as_bits({t: [samples]})[t][0]
            for b in range(3):
                key = f"multi_label_precision-{{}}|{prefix}_multi_label_precisionlabel_{b}"
                exp[key] = _label_precision(bits, b)
        for k, v in exp.items():
            assert got[k.format(t)] == pytest.approx(v, rel=1e-9), k.format(t)
