"""GAUC (session AUC): the mean AUC of the batch's groups (sessions).

Every batch comes with `num_candidates` (n_groups,), the lengths of its consecutive groups
(summing to the batch size). A group counts when both label classes have weight in it and not
all its predictions are equal; its AUC is TorchRec 1.8's weighted AUC (the weight of
positive-negative pairs ordered right over all pairs' weight), exact with ties counting one
half (`shardrec_metrics.auc`; TorchRec orders tied predictions arbitrarily).

    gauc = (sum of the counted groups' AUC + 1e-9) / (counted groups + 2e-9)

(TorchRec's formula: 0.5 when no group counts.) `gauc_num_samples` reports the counted
groups. Sums of per-group values, so exact across ranks (a group never spans ranks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.auc import _auc_of_samples
from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.computation import RecMetricException
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "GAUCMetric",
    "GAUCMetricComputation",
    "compute_gauc",
    "compute_window_auc",
    "get_auc_states",
    "group_sizes",
]


def group_sizes(num_candidates: Tensor, batch: int) -> list[int]:
    """`num_candidates` as a list of group lengths, checked to cover the batch."""
    sizes = [int(n) for n in num_candidates.reshape(-1).tolist()]
    if any(n < 0 for n in sizes) or sum(sizes) != batch:
        raise ValueError(
            f"num_candidates {sizes} must be group lengths >= 0 summing to the batch size "
            f"{batch}; pass one length per consecutive group (session) of the batch"
        )
    return sizes


def _group_auc(predictions: Tensor, labels: Tensor, weights: Tensor) -> float | None:
    """The group's weighted AUC, or None when one label class has no weight or all
    predictions are equal."""
    positive = float((labels * weights).sum())
    negative = float(((1.0 - labels) * weights).sum())
    if positive <= 0 or negative <= 0 or bool((predictions == predictions[0]).all()):
        return None
    return _auc_of_samples(torch.stack([predictions.double(), labels.double(), weights.double()]))


def get_auc_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None, num_candidates: Tensor
) -> dict[str, Tensor]:
    """Per task: the sum of the counted groups' AUC (`auc_sum`) and their count
    (`num_samples`), from (n_tasks, B) inputs."""
    sizes = group_sizes(num_candidates, labels.shape[-1])
    n_tasks = labels.shape[0]
    auc_sum = torch.zeros(n_tasks, dtype=torch.double)
    counted = torch.zeros(n_tasks, dtype=torch.double)
    w = torch.ones_like(labels) if weights is None else weights
    for task in range(n_tasks):
        groups = (torch.split(x[task], sizes) for x in (predictions, labels, w))
        for p, y, v in zip(*groups, strict=True):
            value = _group_auc(p, y, v) if p.numel() else None
            if value is not None:
                auc_sum[task] += value
                counted[task] += 1
    return {"auc_sum": auc_sum, "num_samples": counted}


def compute_window_auc(auc: Tensor, num_samples: Tensor) -> dict[str, Tensor]:
    """TorchRec's `{"gauc": ..., "num_samples": ...}` of the summed states."""
    return {"gauc": compute_gauc(auc, num_samples), "num_samples": num_samples}


def compute_gauc(auc_sum: Tensor, num_samples: Tensor) -> Tensor:
    return (auc_sum + 1e-9) / (num_samples + 2e-9)


class GAUCMetricComputation(SumStatesComputation):
    """GAUC per task; `update` takes `num_candidates=` (module docstring)."""

    _state_names = ("auc_sum", "num_samples")
    _batch_sums = staticmethod(get_auc_states)
    _formulas = (
        Formula(MetricName.GAUC, compute_gauc, _state_names),
        Formula(MetricName.GAUC_NUM_SAMPLES, lambda _, n: n, _state_names),
    )

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        num_candidates = kwargs.get("num_candidates")
        if not isinstance(num_candidates, Tensor):
            raise RecMetricException(
                "GAUCMetricComputation needs num_candidates= (n_groups,) group lengths with "
                "every update (RecMetricModule.update(model_out, num_candidates=...))"
            )
        states = get_auc_states(labels, predictions, weights, num_candidates)
        self._add_states(states, labels.shape[-1])


class GAUCMetric(RecMetric):
    _namespace = MetricNamespace.GAUC
    _computation_class = GAUCMetricComputation
