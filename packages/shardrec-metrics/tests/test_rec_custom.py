"""A metric written against TorchRec's RecMetricComputation contract (its own `update` and
`_compute`) runs inside shardrec's RecMetric, next to the built-in metrics."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from shardrec_metrics.rec.ctr import CTRMetric
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.rec_metric import (
    MetricComputationReport,
    RecMetric,
    RecMetricComputation,
    RecMetricException,
    RecMetricList,
    RecTaskInfo,
)


class MaxPredictionComputation(RecMetricComputation):
    """The largest prediction seen per task: no sum, so written by hand as TorchRec users do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._add_state("max_prediction", torch.full((self._n_tasks,), -1.0), False)

    def update(self, *, predictions: Tensor | None, **kwargs: Any) -> None:  # labels unused
        assert predictions is not None
        state = self.get_state()
        state.copy_(torch.maximum(state, predictions.max(dim=-1).values))

    def get_state(self) -> Tensor:
        state = self.max_prediction
        assert isinstance(state, Tensor)
        return state

    def _compute(self) -> list[MetricComputationReport]:
        return [MetricComputationReport(MetricName.OUTPUT, MetricPrefix.LIFETIME, self.get_state())]


class MaxPredictionMetric(RecMetric):
    _namespace = MetricNamespace.OUTPUT
    _computation_class = MaxPredictionComputation


def test_a_torchrec_style_computation_runs_beside_the_built_in_ones() -> None:
    tasks = [RecTaskInfo(name="t")]
    common: dict[str, Any] = {"world_size": 1, "my_rank": 0, "batch_size": 4, "tasks": tasks}
    metrics = RecMetricList([MaxPredictionMetric(**common), CTRMetric(**common)])
    gen = torch.Generator().manual_seed(0)
    preds = [torch.rand(4, generator=gen) for _ in range(3)]
    labels = [(torch.rand(4, generator=gen) < 0.5).float() for _ in range(3)]
    for p, y in zip(preds, labels, strict=True):
        metrics.update(predictions={"t": p}, labels={"t": y}, weights={"t": torch.ones(4)})
    out = metrics.compute()
    assert out["output-t|lifetime_output"].item() == max(float(p.max()) for p in preds)
    ctr = float(torch.cat(labels).mean())
    assert out["ctr-t|lifetime_ctr"].item() == pytest.approx(ctr, abs=1e-12)
    metrics.reset()
    assert metrics.compute()["output-t|lifetime_output"].item() == -1.0


@pytest.mark.parametrize("missing", ["predictions", "weights"])
def test_built_in_computations_refuse_missing_inputs_by_name(missing: str) -> None:
    metric = CTRMetric(world_size=1, my_rank=0, batch_size=2, tasks=[RecTaskInfo(name="t")])
    computation = metric._computations()[0]
    inputs: dict[str, Tensor | None] = {
        "predictions": torch.rand(1, 2),
        "labels": torch.ones(1, 2),
        "weights": torch.ones(1, 2),
    }
    inputs[missing] = None
    with pytest.raises(RecMetricException, match="'predictions' and 'weights' should not be None"):
        computation.update(**inputs)  # type: ignore[arg-type]  # labels is never None here
