"""NE, log loss and accuracy against naive loops; windows exact to the sample."""

from __future__ import annotations

import math

import pytest
import torch
from _reference import naive_accuracy, naive_log_loss, naive_ne
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardrec_metrics import NE, Accuracy, LogLoss, MetricCollection, RecMetric

SCORE = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0, width=32))
WEIGHT = st.one_of(st.sampled_from([0.0, 1.0, 2.0]), st.floats(0.0, 10.0, width=32))
SAMPLE = st.tuples(SCORE, st.sampled_from([0.0, 1.0]), WEIGHT)
REFERENCES = {"ne": naive_ne, "log_loss": naive_log_loss, "accuracy": naive_accuracy}


def _tensors(samples: list[tuple[float, float, float]]) -> tuple[torch.Tensor, ...]:
    cols = list(zip(*samples, strict=True)) if samples else [[], [], []]
    return tuple(torch.tensor(c, dtype=torch.float32) for c in cols)


def _approx(value: float) -> object:
    return pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True)


def _metrics(window_size: int) -> list[RecMetric]:
    return [
        NE(window_size=window_size),
        LogLoss(window_size=window_size),
        Accuracy(window_size=window_size),
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(SAMPLE, max_size=10), min_size=1, max_size=6),
    st.integers(1, 25),
)
# Found by Hypothesis: a total weight below 1e-12 once had its positive rate floored.
@example([[(0.0, 0.0, 0.0), (0.0, 0.0, 1.0), (0.0, 1.0, 1.1754943508222875e-38)]], 1)
@example([[(0.0, 1.0, 1.1754943508222875e-38)]], 1)
def test_lifetime_and_window_match_naive_loops(
    batches: list[list[tuple[float, float, float]]], window_size: int
) -> None:
    metrics = _metrics(window_size)
    for batch in batches:
        p, y, w = _tensors(batch)
        for m in metrics:
            m.update(predictions=p, labels=y, weights=w)
    p, y, w = (t.tolist() for t in _tensors([s for b in batches for s in b]))
    lo = max(0, len(p) - window_size)
    for m in metrics:
        ref = REFERENCES[m.name]
        got = m.compute()
        assert got[f"{m.name}/lifetime"] == _approx(ref(p, y, w)), m.name
        assert got[f"{m.name}/window"] == _approx(ref(p[lo:], y[lo:], w[lo:])), m.name


def test_window_drops_part_of_a_batch() -> None:
    # Batches of 5, window of 8: the window holds 3 samples of the second-to-last batch.
    ne = NE(window_size=8)
    gen = torch.Generator().manual_seed(1)
    p = torch.rand(15, generator=gen)
    y = (torch.rand(15, generator=gen) < 0.5).float()
    for lo in range(0, 15, 5):
        ne.update(predictions=p[lo : lo + 5], labels=y[lo : lo + 5])
    ones = [1.0] * 8
    assert ne.compute()["ne/window"] == _approx(naive_ne(p[7:].tolist(), y[7:].tolist(), ones))


def test_a_batch_larger_than_the_window() -> None:
    acc = Accuracy(window_size=3)
    acc.update(predictions=torch.tensor([0.9, 0.9, 0.9, 0.1, 0.1]), labels=torch.ones(5))
    assert acc.compute() == {"accuracy/lifetime": 0.6, "accuracy/window": pytest.approx(1 / 3)}


def test_accuracy_threshold_option_and_boundary() -> None:
    p = torch.tensor([0.5, 0.3, 0.7])
    y = torch.tensor([1.0, 1.0, 0.0])
    default = Accuracy()
    default.update(predictions=p, labels=y)
    assert default.compute()["accuracy/lifetime"] == pytest.approx(1 / 3)  # 0.5 counts as 1
    low = Accuracy(threshold=0.25)
    low.update(predictions=p, labels=y)
    assert low.compute()["accuracy/lifetime"] == pytest.approx(2 / 3)


def test_log_loss_is_mean_bce_in_nats() -> None:
    gen = torch.Generator().manual_seed(2)
    p = torch.rand(50, generator=gen)
    y = (torch.rand(50, generator=gen) < 0.3).float()
    w = torch.rand(50, generator=gen)
    loss = LogLoss()
    loss.update(predictions=p, labels=y, weights=w)
    bce = torch.nn.functional.binary_cross_entropy(p.double(), y.double(), weight=w.double())
    expected = float(bce) * 50 / float(w.double().sum())  # BCE's mean is over samples
    assert loss.compute()["log_loss/lifetime"] == pytest.approx(expected, rel=1e-9)


def test_perfect_and_constant_predictions() -> None:
    y = torch.tensor([0.0, 1.0, 1.0, 0.0])
    ne = NE()
    ne.update(predictions=torch.full((4,), 0.5), labels=y)  # predicting the base rate
    assert ne.compute()["ne/lifetime"] == pytest.approx(1.0)
    ne.reset()
    ne.update(predictions=y, labels=y)  # exact 0/1 predictions: clamped, not -inf
    assert 0 < ne.compute()["ne/lifetime"] < 1e-10


def test_single_class_ne_is_finite_and_large_like_torchrec() -> None:
    ne = NE()
    p = torch.tensor([0.2, 0.4])
    ne.update(predictions=p, labels=torch.zeros(2))
    value = ne.compute()["ne/lifetime"]
    assert math.isfinite(value) and value > 1e6
    assert value == _approx(naive_ne(p.tolist(), [0.0, 0.0], [1.0, 1.0]))


def test_no_samples_give_nan() -> None:
    for m in _metrics(4):
        assert all(math.isnan(v) for v in m.compute().values()), m.name
        m.update(predictions=torch.tensor([0.3]), labels=torch.tensor([1.0]))
        m.reset()
        assert all(math.isnan(v) for v in m.compute().values()), m.name


def test_collection_equals_separate_metrics() -> None:
    gen = torch.Generator().manual_seed(3)
    p = torch.rand(64, generator=gen)
    y = (torch.rand(64, generator=gen) < p).float()
    separate = _metrics(20)
    together = MetricCollection(_metrics(20))
    for lo in range(0, 64, 16):
        batch = {"predictions": p[lo : lo + 16], "labels": y[lo : lo + 16]}
        together.update(**batch)
        for m in separate:
            m.update(**batch)
    expected: dict[str, float] = {}
    for m in separate:
        expected.update(m.compute())
    assert together.compute() == expected
    together.reset()
    assert all(math.isnan(v) for v in together.compute().values())


def test_window_storage_grows_then_wraps() -> None:
    # A window above the initial 1024-sample capacity: storage doubles, fills, then wraps.
    gen = torch.Generator().manual_seed(4)
    sizes = torch.randint(0, 700, (20,), generator=gen).tolist()
    total = sum(sizes)
    p = torch.rand(total, generator=gen)
    y = (torch.rand(total, generator=gen) < p).float()
    w = torch.rand(total, generator=gen)
    metrics = _metrics(3000)
    lo = 0
    for n in sizes:
        for m in metrics:
            m.update(predictions=p[lo : lo + n], labels=y[lo : lo + n], weights=w[lo : lo + n])
        lo += n
        tail = slice(max(0, lo - 3000), lo)
        cols = [t[tail].tolist() for t in (p, y, w)]
        for m in metrics:
            assert m.compute()[f"{m.name}/window"] == _approx(REFERENCES[m.name](*cols)), m.name
