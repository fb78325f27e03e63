"""Every bad input raises the right type with a message naming the offending value."""

from __future__ import annotations

import pytest
import torch

from shardrec_metrics import (
    AUC,
    NE,
    Accuracy,
    LogLoss,
    MetricCollection,
    RecMetric,
    Throughput,
    roc_auc,
)

METRICS: list[type[RecMetric]] = [AUC, NE, LogLoss, Accuracy]
P = torch.tensor([0.2, 0.7, 0.5])
Y = torch.tensor([0.0, 1.0, 1.0])


@pytest.fixture(params=METRICS, ids=lambda c: c.__name__)
def metric(request: pytest.FixtureRequest) -> RecMetric:
    cls: type[RecMetric] = request.param
    return cls()


def test_logits_instead_of_probabilities(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match=r"min -1\.5 and max 3\.25: apply sigmoid to logits"):
        metric.update(predictions=torch.tensor([-1.5, 0.5, 3.25]), labels=Y)


def test_nan_predictions(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match="predictions contain NaN"):
        metric.update(predictions=torch.tensor([0.1, float("nan"), 0.3]), labels=Y)


def test_shape_mismatch_names_both_shapes(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match=r"predictions shape \(3,\) and labels shape \(4,\)"):
        metric.update(predictions=P, labels=torch.zeros(4))
    with pytest.raises(ValueError, match=r"predictions shape \(3,\) and weights shape \(2,\)"):
        metric.update(predictions=P, labels=Y, weights=torch.ones(2))


def test_predictions_of_shape_b_by_1(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match=r"shape \(B,\), got \(3, 1\); use predictions.squeeze"):
        metric.update(predictions=P[:, None], labels=Y[:, None])


def test_non_binary_labels(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match=r"labels must be 0 or 1, got 0\.75"):
        metric.update(predictions=P, labels=torch.tensor([0.0, 0.75, 1.0]))
    with pytest.raises(ValueError, match=r"labels must be 0 or 1, got 2"):
        metric.update(predictions=P, labels=torch.tensor([0, 2, 1]))


def test_negative_or_infinite_weights(metric: RecMetric) -> None:
    with pytest.raises(ValueError, match=r"weights must be finite and >= 0, got -0\.5"):
        metric.update(predictions=P, labels=Y, weights=torch.tensor([1.0, -0.5, 1.0]))
    with pytest.raises(ValueError, match=r"got inf"):
        metric.update(predictions=P, labels=Y, weights=torch.tensor([1.0, float("inf"), 1.0]))


def test_bad_input_leaves_the_metric_unchanged(metric: RecMetric) -> None:
    metric.update(predictions=P, labels=Y)
    before = metric.compute()
    with pytest.raises(ValueError):
        metric.update(predictions=torch.tensor([2.0, 0.5, 0.5]), labels=Y)
    assert metric.compute() == before


def test_not_tensors_and_integer_predictions(metric: RecMetric) -> None:
    with pytest.raises(TypeError, match=r"predictions must be a torch\.Tensor, got list"):
        metric.update(predictions=[0.1, 0.2], labels=Y)  # type: ignore[arg-type]  # the bad input
    with pytest.raises(TypeError, match=r"weights must be a torch\.Tensor, got float"):
        metric.update(predictions=P, labels=Y, weights=1.0)  # type: ignore[arg-type]  # the bad input
    with pytest.raises(TypeError, match=r"floating tensor, got dtype torch\.int64"):
        metric.update(predictions=torch.tensor([0, 1, 1]), labels=Y)


@pytest.mark.parametrize("cls", METRICS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("size", [0, -3, 2.5, True])
def test_window_size_must_be_positive(cls: type[RecMetric], size: object) -> None:
    with pytest.raises(ValueError, match=rf"window_size must be a positive int.*got {size!r}"):
        cls(window_size=size)  # type: ignore[arg-type]  # the bad input


@pytest.mark.parametrize("threshold", [-0.1, 1.5, float("nan")])
def test_accuracy_threshold(threshold: float) -> None:
    with pytest.raises(
        ValueError, match=rf"threshold must be a probability in \[0, 1\], got {threshold}"
    ):
        Accuracy(threshold=threshold)


def test_roc_auc_validates_too() -> None:
    with pytest.raises(ValueError, match="apply sigmoid to logits"):
        roc_auc(torch.tensor([-2.0, 4.0]), torch.tensor([0, 1]))


def test_collection_rejects_duplicates_and_non_metrics() -> None:
    with pytest.raises(ValueError, match="two metrics named 'auc'"):
        MetricCollection([AUC(), AUC(window_size=10)])
    with pytest.raises(TypeError, match="got Throughput"):
        MetricCollection([Throughput()])  # type: ignore[list-item]  # the bad input
    with pytest.raises(ValueError, match="apply sigmoid to logits"):
        MetricCollection([AUC(), NE()]).update(predictions=P * 4, labels=Y)


@pytest.mark.parametrize("seconds", [0, -1.0, float("inf"), float("nan")])
def test_throughput_window_seconds(seconds: float) -> None:
    with pytest.raises(
        ValueError, match=rf"window_seconds must be a positive number, got {seconds}"
    ):
        Throughput(window_seconds=seconds)


@pytest.mark.parametrize("n", [-1, 2.0, True])
def test_throughput_num_samples(n: object) -> None:
    with pytest.raises(ValueError, match=rf"num_samples must be an int >= 0, got {n!r}"):
        Throughput().update(n)  # type: ignore[arg-type]  # the bad input
