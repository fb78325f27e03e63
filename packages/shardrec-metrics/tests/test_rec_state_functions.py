"""TorchRec's public `get_*_states` functions of the one-sum metrics against naive loops, with
and without weights, and the namespace each metric's keys carry."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import pytest
import torch

Naive = Callable[[float, float], float]  # (label, prediction) -> per-sample value

# module, its get_*_states function, the state it fills, the per-sample value weighed
CASES: list[tuple[str, str, str, Naive]] = [
    ("num_missing_labels", "get_num_missing_labels_states", "missing_label_sum",
     lambda y, p: 1.0 if math.isnan(y) else 0.0),
    ("num_positive_samples", "get_num_positive_sample_states", "weighted_pos_sum",
     lambda y, p: 0.0 if math.isnan(y) else y),
    ("sum_weights", "get_weighted_sum_states", "weighted_sum", lambda y, p: 1.0),
    ("weighted_sum_predictions", "get_weighted_sum_prediction_states",
     "weighted_predictions_sum", lambda y, p: 0.0 if math.isnan(p) else p),
]  # fmt: skip


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    labels = (torch.rand(2, 9, generator=gen, dtype=torch.double) < 0.4).double()
    labels[0, 3] = labels[1, 0] = float("nan")
    predictions = torch.rand(2, 9, generator=gen, dtype=torch.double)
    predictions[1, 5] = float("nan")
    weights = torch.rand(2, 9, generator=gen, dtype=torch.double)
    return labels, predictions, weights


@pytest.mark.parametrize(("module", "function", "state", "value"), CASES)
def test_state_function_matches_naive_sums(
    module: str, function: str, state: str, value: Naive
) -> None:
    states = getattr(importlib.import_module(f"shardrec_metrics.rec.{module}"), function)
    labels, predictions, weights = _batch()
    for w in (weights, None):
        got = states(labels, predictions, w)
        assert list(got) == [state]
        ones = torch.ones_like(labels) if w is None else w
        for task in range(2):
            rows = zip(*(t[task].tolist() for t in (labels, predictions, ones)), strict=True)
            expected = sum(wt * value(y, p) for y, p, wt in rows)
            assert float(got[state][task]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("module", [c[0] for c in CASES])
def test_metric_namespace_and_name_are_the_module_name(module: str) -> None:
    mod = importlib.import_module(f"shardrec_metrics.rec.{module}")
    metric_cls = getattr(mod, mod.__all__[0])
    assert str(metric_cls._namespace) == module
    metric = metric_cls(world_size=1, my_rank=0, batch_size=9, tasks=[], window_size=100)
    assert metric.compute() == {}
