"""Same values as TorchRec 1.8's metrics where torchrec imports (skipped otherwise).

TorchRec's AUC orders tied scores arbitrarily, so its inputs here have no ties; its log loss is
in bits (ours is in nats); its window drops whole batches, so windows are compared only where
they hold every batch. TorchRec sums weights and positive weights in float32 (ours: float64),
so NE agrees to about 1e-7 relative.
"""

from __future__ import annotations

import math

import pytest
import torch

from shardrec_metrics import AUC, NE, Accuracy, LogLoss

pytest.importorskip("torchrec.metrics.ne", reason="torchrec is not installed here")
from torchrec.metrics.accuracy import AccuracyMetric
from torchrec.metrics.auc import AUCMetric
from torchrec.metrics.metrics_config import RecTaskInfo
from torchrec.metrics.ne import NEMetric

TASK = RecTaskInfo(name="t", label_name="label", prediction_name="pred", weight_name="w")
BATCH = 64


def _batches(seed: int, n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p = torch.rand(BATCH, generator=gen)
        y = (torch.rand(BATCH, generator=gen) < p).float()
        w = torch.rand(BATCH, generator=gen) * 2
        out.append((p, y, w))
    return out


def _torchrec_values(cls: type, seed: int, **kwargs: object) -> dict[str, float]:
    metric = cls(
        world_size=1, my_rank=0, batch_size=BATCH, tasks=[TASK], window_size=10**6, **kwargs
    )
    for p, y, w in _batches(seed):
        metric.update(predictions={"t": p}, labels={"t": y}, weights={"t": w})
    return {k: float(v) for k, v in metric.compute().items()}


def _our_values(metric: object, seed: int) -> dict[str, float]:
    for p, y, w in _batches(seed):
        metric.update(predictions=p, labels=y, weights=w)  # type: ignore[attr-defined]  # any RecMetric
    return metric.compute()  # type: ignore[attr-defined, no-any-return]  # any RecMetric


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ne_and_log_loss(seed: int) -> None:
    theirs = _torchrec_values(NEMetric, seed, include_logloss=True)
    ne = _our_values(NE(), seed)
    loss = _our_values(LogLoss(), seed)
    assert ne["ne/lifetime"] == pytest.approx(theirs["ne-t|lifetime_ne"], rel=1e-6)
    assert ne["ne/window"] == pytest.approx(theirs["ne-t|window_ne"], rel=1e-6)
    bits = loss["log_loss/lifetime"] / math.log(2)
    assert bits == pytest.approx(theirs["ne-t|lifetime_logloss"], rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_accuracy(seed: int) -> None:
    theirs = _torchrec_values(AccuracyMetric, seed)
    ours = _our_values(Accuracy(), seed)
    assert ours["accuracy/lifetime"] == pytest.approx(theirs["accuracy-t|lifetime_accuracy"])
    assert ours["accuracy/window"] == pytest.approx(theirs["accuracy-t|window_accuracy"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_without_ties(seed: int) -> None:
    theirs = _torchrec_values(AUCMetric, seed)
    ours = _our_values(AUC(), seed)
    assert ours["auc/window"] == pytest.approx(theirs["auc-t|window_auc"], rel=1e-5)


def test_single_class_auc_agrees_on_one_half() -> None:
    metric = AUCMetric(world_size=1, my_rank=0, batch_size=4, tasks=[TASK], window_size=100)
    p = torch.tensor([0.1, 0.5, 0.7, 0.9])
    metric.update(predictions={"t": p}, labels={"t": torch.ones(4)}, weights={"t": torch.ones(4)})
    ours = AUC()
    ours.update(predictions=p, labels=torch.ones(4))
    assert float(metric.compute()["auc-t|window_auc"]) == ours.compute()["auc/window"] == 0.5
