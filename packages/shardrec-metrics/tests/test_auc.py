"""AUC against the pairwise reference: ties, weights, windows, single class, no samples."""

from __future__ import annotations

import math

import pytest
import torch
from _reference import naive_auc
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_metrics import AUC, roc_auc

# Few distinct scores so that ties (within and across classes) are common.
TIED = st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0])
SCORE = st.one_of(TIED, st.floats(0.0, 1.0, width=32))
WEIGHT = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0.0, 10.0, width=32))
SAMPLE = st.tuples(SCORE, st.sampled_from([0.0, 1.0]), WEIGHT)


def _tensors(samples: list[tuple[float, float, float]]) -> tuple[torch.Tensor, ...]:
    cols = list(zip(*samples, strict=True)) if samples else [[], [], []]
    return tuple(torch.tensor(c, dtype=torch.float32) for c in cols)


def _approx(value: float) -> object:
    return pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True)


@settings(max_examples=80, deadline=None)
@given(st.lists(SAMPLE, max_size=40))
def test_roc_auc_matches_pairwise_reference(samples: list[tuple[float, float, float]]) -> None:
    p, y, w = _tensors(samples)
    assert roc_auc(p, y, w) == _approx(naive_auc(p.tolist(), y.tolist(), w.tolist()))


@settings(max_examples=40, deadline=None)
@given(st.lists(SAMPLE, max_size=40))
def test_unweighted_equals_weights_of_one(samples: list[tuple[float, float, float]]) -> None:
    p, y, _ = _tensors(samples)
    assert roc_auc(p, y) == _approx(roc_auc(p, y, torch.ones_like(p)))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(SAMPLE, max_size=12), min_size=1, max_size=6),
    st.integers(1, 30),
)
def test_metric_lifetime_and_window_over_batches(
    batches: list[list[tuple[float, float, float]]], window_size: int
) -> None:
    metric = AUC(window_size=window_size)
    for batch in batches:
        p, y, w = _tensors(batch)
        metric.update(predictions=p, labels=y, weights=w)
    p, y, w = _tensors([s for b in batches for s in b])
    got = metric.compute()
    assert got["auc/lifetime"] == _approx(naive_auc(p.tolist(), y.tolist(), w.tolist()))
    tail = slice(max(0, len(p) - window_size), None)
    expected_window = naive_auc(p[tail].tolist(), y[tail].tolist(), w[tail].tolist())
    assert got["auc/window"] == _approx(expected_window)


def test_known_values() -> None:
    y = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert roc_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), y) == 0.75  # sklearn's doc example
    assert roc_auc(torch.tensor([0.5, 0.5, 0.5, 0.5]), y) == 0.5  # all tied
    assert roc_auc(torch.tensor([0.9, 0.8, 0.1, 0.2]), y) == 0.0  # perfectly inverted


def test_single_class_is_one_half() -> None:
    p = torch.tensor([0.1, 0.9, 0.3])
    assert roc_auc(p, torch.ones(3)) == 0.5
    assert roc_auc(p, torch.zeros(3)) == 0.5
    # positive weight only on one class counts as single class too
    assert roc_auc(p, torch.tensor([0.0, 1.0, 1.0]), torch.tensor([0.0, 1.0, 1.0])) == 0.5


def test_no_samples_is_nan_and_reset_forgets() -> None:
    metric = AUC(window_size=4)
    assert all(math.isnan(v) for v in metric.compute().values())
    metric.update(predictions=torch.empty(0), labels=torch.empty(0))
    assert all(math.isnan(v) for v in metric.compute().values())
    metric.update(predictions=torch.tensor([0.2, 0.8]), labels=torch.tensor([0, 1]))
    assert metric.compute() == {"auc/lifetime": 1.0, "auc/window": 1.0}
    metric.reset()
    assert metric.num_samples == 0
    assert all(math.isnan(v) for v in metric.compute().values())
    # zero total weight is no samples as well
    assert math.isnan(roc_auc(torch.tensor([0.3, 0.6]), torch.tensor([0, 1]), torch.zeros(2)))


def test_compute_between_updates_keeps_every_sample() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(300, generator=gen)
    y = (torch.rand(300, generator=gen) < p).float()
    metric = AUC(window_size=120)
    for lo in range(0, 300, 50):
        metric.update(predictions=p[lo : lo + 50], labels=y[lo : lo + 50])
        metric.compute()  # concatenates the kept rows; later updates must still append
    got = metric.compute()
    assert got["auc/lifetime"] == _approx(roc_auc(p, y))
    assert got["auc/window"] == _approx(roc_auc(p[-120:], y[-120:]))


def test_bool_and_int_labels_and_float64_predictions() -> None:
    p = torch.tensor([0.2, 0.6, 0.4], dtype=torch.float64)
    assert roc_auc(p, torch.tensor([False, True, False])) == 1.0
    assert roc_auc(p, torch.tensor([0, 1, 0])) == 1.0
