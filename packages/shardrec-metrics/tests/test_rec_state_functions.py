"""TorchRec's public `get_*_states` functions of the one-sum and ratio metrics against naive
loops (with and without weights, the threshold positional or by keyword), and the namespace
each metric's keys carry (derived from its row unless a subclass sets one)."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import pytest
import torch

from shardrec_metrics.rec.ctr import CTRMetric, CTRMetricComputation
from shardrec_metrics.rec.metrics_config import RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricNamespace

Naive = Callable[[float, float, float], float]  # (label, prediction, threshold) -> value


def _no_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else x


# module, its get_*_states function, {state: per-sample value, weighed and summed}
CASES: list[tuple[str, str, dict[str, Naive]]] = [
    ("num_missing_labels", "get_num_missing_labels_states",
     {"missing_label_sum": lambda y, p, t: float(math.isnan(y))}),
    ("num_positive_samples", "get_num_positive_sample_states",
     {"weighted_pos_sum": lambda y, p, t: _no_nan(y)}),
    ("sum_weights", "get_weighted_sum_states", {"weighted_sum": lambda y, p, t: 1.0}),
    ("weighted_sum_predictions", "get_weighted_sum_prediction_states",
     {"weighted_predictions_sum": lambda y, p, t: _no_nan(p)}),
    ("ctr", "get_ctr_states", {"ctr_num": lambda y, p, t: y, "ctr_denom": lambda y, p, t: 1.0}),
    ("calibration", "get_calibration_states",
     {"calibration_num": lambda y, p, t: p, "calibration_denom": lambda y, p, t: y}),
    ("mae", "get_mae_states",
     {"error_sum": lambda y, p, t: abs(y - p), "weighted_num_samples": lambda y, p, t: 1.0}),
    ("accuracy", "get_accuracy_states",
     {"accuracy_sum": lambda y, p, t: float((p >= t) == y),
      "weighted_num_samples": lambda y, p, t: 1.0}),
    ("precision", "get_precision_states",
     {"true_pos_sum": lambda y, p, t: float(p >= t) * y,
      "false_pos_sum": lambda y, p, t: float(p >= t) * (1 - y)}),
    ("recall", "get_recall_states",
     {"true_pos_sum": lambda y, p, t: float(p >= t) * y,
      "false_neg_sum": lambda y, p, t: float(p <= t) * y}),
]  # fmt: skip
THRESHOLDED = ("accuracy", "precision", "recall")


def _batch(nan: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    labels = (torch.rand(2, 9, generator=gen, dtype=torch.double) < 0.4).double()
    predictions = torch.rand(2, 9, generator=gen, dtype=torch.double)
    predictions[0, 2] = 0.7  # exactly at a threshold below
    if nan:  # only the one-sum metrics define NaN labels and predictions
        labels[0, 3] = labels[1, 0] = predictions[1, 5] = float("nan")
    weights = torch.rand(2, 9, generator=gen, dtype=torch.double)
    return labels, predictions, weights


@pytest.mark.parametrize(("module", "function", "values"), CASES)
def test_state_function_matches_naive_sums(
    module: str, function: str, values: dict[str, Naive]
) -> None:
    states = getattr(importlib.import_module(f"shardrec_metrics.rec.{module}"), function)
    labels, predictions, weights = _batch(nan=module.startswith(("num_", "weighted_sum")))
    calls: list[tuple[torch.Tensor | None, tuple[float, ...], dict[str, float], float]] = [
        (weights, (), {}, 0.5),
        (None, (), {}, 0.5),
    ]
    if module in THRESHOLDED:
        calls += [(weights, (0.7,), {}, 0.7), (None, (), {"threshold": 0.7}, 0.7)]
    for w, args, kwargs, threshold in calls:
        got = states(labels, predictions, w, *args, **kwargs)
        assert list(got) == list(values)
        ones = torch.ones_like(labels) if w is None else w
        for task in range(2):
            rows = list(zip(*(t[task].tolist() for t in (labels, predictions, ones)), strict=True))
            for state, value in values.items():
                expected = sum(wt * value(y, p, threshold) for y, p, wt in rows)
                assert float(got[state][task]) == pytest.approx(expected, rel=1e-12), state


@pytest.mark.parametrize("module", [c[0] for c in CASES])
def test_metric_namespace_is_the_module_name(module: str) -> None:
    mod = importlib.import_module(f"shardrec_metrics.rec.{module}")
    metric_cls = next(getattr(mod, n) for n in mod.__all__ if n.endswith("Metric"))
    assert str(metric_cls._namespace) == module
    metric = metric_cls(world_size=1, my_rank=0, batch_size=9, tasks=[], window_size=100)
    assert metric.compute() == {}


def test_a_subclass_keeps_the_namespace_it_sets() -> None:
    class ServingCTR(CTRMetric):
        _namespace = MetricNamespace.SERVING_NE

    class DerivedCTR(CTRMetric):
        _computation_class = CTRMetricComputation

    assert ServingCTR._namespace is MetricNamespace.SERVING_NE
    assert DerivedCTR._namespace is MetricNamespace.CTR
    metric = ServingCTR(world_size=1, my_rank=0, batch_size=2, tasks=[RecTaskInfo(name="t")])
    metric.update(
        predictions={"t": torch.tensor([0.2, 0.9])},
        labels={"t": torch.tensor([0.0, 1.0])},
        weights={"t": torch.tensor([1.0, 3.0])},
    )
    assert float(metric.compute()["serving_ne-t|lifetime_ctr"]) == pytest.approx(0.75)
