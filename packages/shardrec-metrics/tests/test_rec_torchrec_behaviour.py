"""TorchRec behaviours that running TorchRec's own metric tests on shardrec brought out, each
against a hand count or a naive loop: validation masks every report, tower QPS skips tasks
without labels, the compute-interval sizing with a stand-in metric list, grouped AUC."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from unittest import mock

import _rec_reference as ref
import pytest
import torch
from _rec_data import Sample, make_metric, random_batches

from shardrec_metrics.rec.auc import GROUPING_KEYS, AUCMetric
from shardrec_metrics.rec.auprc import AUPRCMetric
from shardrec_metrics.rec.calibration import CalibrationMetric
from shardrec_metrics.rec.computation import RecMetricException
from shardrec_metrics.rec.metric_module import RecMetricModule
from shardrec_metrics.rec.metrics_config import RecComputeMode
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.rauc import RAUCMetric
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricList

TASKS = ["t1", "t2"]
FUSED = RecComputeMode.FUSED_TASKS_COMPUTATION
UNFUSED = RecComputeMode.UNFUSED_TASKS_COMPUTATION
Data = dict[str, list[list[Sample]]]


def _cols(data: Data, i: int) -> dict[str, torch.Tensor]:
    return {t: torch.tensor(data[t][i], dtype=torch.double).T for t in TASKS}


def _feed(
    metric: RecMetric, data: Data, mode: RecComputeMode, keys: Sequence[list[int]] = ()
) -> None:
    for i in range(len(data[TASKS[0]])):
        cols = _cols(data, i)
        p, y, w = ({t: c[k] for t, c in cols.items()} for k in range(3))
        extra = {"required_inputs": {GROUPING_KEYS: torch.tensor(keys[i])}} if keys else {}
        if mode == FUSED:
            stack = lambda d: torch.stack([d[t] for t in TASKS])  # noqa: E731
            metric.update(predictions=stack(p), labels=stack(y), weights=stack(w), **extra)
        else:
            metric.update(predictions=p, labels=y, weights=w, **extra)


@pytest.mark.parametrize("cls", [NEMetric, MSEMetric, CalibrationMetric])
@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_validate_update_masks_every_report_of_a_task_without_weight(
    cls: type[RecMetric], mode: RecComputeMode
) -> None:
    """Each report (lifetime and window, every metric name) keeps its key under validation;
    a task whose weights were all zero reads 0 in every one, the other task reads what an
    unvalidated metric fed the same batches reads."""
    data = random_batches(5, [4, 4, 4], TASKS)
    masked = {
        TASKS[0]: data[TASKS[0]],
        TASKS[1]: [[(p, y, 0.0) for p, y, _ in b] for b in data[TASKS[1]]],
    }
    checked = make_metric(cls, TASKS, mode, 100, should_validate_update=True)
    plain = make_metric(cls, TASKS, mode, 100)
    _feed(checked, masked, mode)
    _feed(plain, data, mode)
    got, want = checked.compute(), plain.compute()
    assert sorted(got) == sorted(want)
    for key, value in got.items():
        if f"-{TASKS[1]}|" in key:
            assert float(value) == 0.0, key
        else:
            assert float(value) == pytest.approx(float(want[key]), rel=1e-12), key


class _ListStandIn:
    """A duck-typed RecMetricList (as a user's mock): truthy, without a len."""

    def __init__(self) -> None:
        self.computes = 0

    def compute(self) -> dict[str, torch.Tensor]:
        self.computes += 1
        return {"stand-in|x": torch.tensor(1.0)}


@pytest.mark.parametrize("stand_in", [False, True])
@pytest.mark.parametrize(
    ("low", "high", "want"),
    # 1 s per step, 100 steps between the first two computes; the new interval by hand:
    # (high - 1) s, (low + 1) s, the middle, each over 1 s per step; none when 100 s fits
    [(0.0, 30.0, 29), (150.0, math.inf, 151), (15.0, 30.0, 22), (50.0, 150.0, 100)],
)
def test_compute_interval_is_sized_after_the_second_compute(
    stand_in: bool, low: float, high: float, want: int
) -> None:
    metrics = (
        _ListStandIn() if stand_in else RecMetricList([make_metric(NEMetric, TASKS, UNFUSED, 100)])
    )
    clock = [0.0]
    with mock.patch("shardrec_metrics.rec.metric_module.time.time", lambda: clock[0]):
        module = RecMetricModule(
            batch_size=4,
            world_size=1,
            rec_metrics=metrics,  # type: ignore[arg-type]
            min_compute_interval=low,
            max_compute_interval=high,
        )
        for _ in range(2):
            clock[0] += 100.0
            assert module.compute_interval_steps == 100
            module.compute()
    assert module.compute_interval_steps == want
    assert (module.min_compute_interval, module.max_compute_interval) == (-1.0, -1.0)
    if stand_in:
        assert metrics.computes == 2  # type: ignore[union-attr]


def _rauc(samples: Sequence[Sample]) -> float:
    """1 - label inversions over all pairs, samples ordered by (prediction, label): a
    naive pair loop."""
    ys = [y for p, y, _ in sorted(samples, key=lambda s: (s[0], s[1]))]
    n = len(ys)
    inversions = sum(ys[i] > ys[j] for i in range(n) for j in range(i + 1, n))
    return 1 - inversions / (n * (n - 1) / 2)


def _mean_over_groups(
    fn: Callable[[Sequence[Sample]], float], samples: Sequence[Sample], keys: Sequence[int]
) -> float:
    groups = sorted(set(keys))
    per_group = [fn([s for s, k in zip(samples, keys, strict=True) if k == g]) for g in groups]
    return sum(per_group) / len(groups)


@pytest.mark.parametrize(
    ("cls", "flag", "name", "fn"),
    [
        (AUCMetric, "grouped_auc", "auc", ref.auc),
        (RAUCMetric, "grouped_rauc", "rauc", _rauc),
        (AUPRCMetric, "grouped_auprc", "auprc", ref.auprc),
    ],
)
@pytest.mark.parametrize("mode", [UNFUSED, FUSED])
def test_grouped_value_is_the_mean_over_the_window_groups(
    cls: type[RecMetric],
    flag: str,
    name: str,
    fn: Callable[[Sequence[Sample]], float],
    mode: RecComputeMode,
) -> None:
    sizes = [5, 5, 5, 3]
    data = random_batches(21, sizes, TASKS)
    g = torch.Generator().manual_seed(4)
    keys = [torch.randint(0, 3, (n,), generator=g).tolist() for n in sizes]
    metric = make_metric(cls, TASKS, mode, window=12, **{flag: True})
    assert GROUPING_KEYS in metric.get_required_inputs()
    _feed(metric, data, mode, keys)
    out = metric.compute()
    flat_keys = [k for b in keys for k in b][-12:]
    for t in TASKS:
        window = ref.window_samples(data[t], 12)
        assert len(window) == len(flat_keys) == 12
        got = out[f"{name}-{t}|window_grouped_{name}"]
        assert got.dtype == torch.float32  # as TorchRec's grouped values
        assert float(got) == pytest.approx(_mean_over_groups(fn, window, flat_keys), rel=1e-6)
        assert float(out[f"{name}-{t}|window_{name}"]) == pytest.approx(fn(window), rel=1e-6)


@pytest.mark.parametrize(
    ("cls", "flag"),
    [(AUCMetric, "grouped_auc"), (RAUCMetric, "grouped_rauc"), (AUPRCMetric, "grouped_auprc")],
)
def test_grouped_bad_input_names_the_fix(cls: type[RecMetric], flag: str) -> None:
    metric = make_metric(cls, TASKS, UNFUSED, window=12, **{flag: True})
    one = {t: torch.rand(4) for t in TASKS}
    with pytest.raises(RecMetricException, match="grouping_keys"):
        metric.update(predictions=one, labels=one, weights=None)
    with pytest.raises(ValueError, match="grouping_keys"):
        metric.update(
            predictions=one,
            labels=one,
            weights=None,
            required_inputs={GROUPING_KEYS: torch.arange(3)},
        )
    with pytest.raises(RecMetricException, match="fused update"):
        make_metric(cls, TASKS, UNFUSED, window=12, fused_update_limit=2, **{flag: True})
