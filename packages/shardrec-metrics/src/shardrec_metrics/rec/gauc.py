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


def _group_aucs(
    predictions: Tensor, labels: Tensor, weights: Tensor, group: Tensor, n_groups: int
) -> tuple[Tensor, Tensor]:
    """(n_groups,) weighted AUC of one task's groups (`group`: each sample's group index,
    ascending), and whether each group counts. Vectorized: samples sorted by (group,
    prediction); a run of equal (group, prediction) is a tie block whose positives win over
    the negative weight below it in the group and half of the block's own."""
    if predictions.numel() == 0:
        zeros = torch.zeros(n_groups, dtype=torch.double)
        return zeros, zeros > 0
    by_prediction = torch.argsort(predictions, stable=True)
    order = by_prediction[torch.argsort(group[by_prediction], stable=True)]
    g, p = group[order], predictions[order]
    pos = (labels * weights)[order].double()
    neg = weights[order].double() - pos
    starts = torch.ones_like(g, dtype=torch.bool)
    starts[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    block = torch.cumsum(starts.long(), dim=0) - 1
    n_blocks = int(block[-1]) + 1
    block_group = g[starts]
    pos_block = torch.zeros(n_blocks, dtype=torch.double).index_add_(0, block, pos)
    neg_block = torch.zeros(n_blocks, dtype=torch.double).index_add_(0, block, neg)
    below = torch.cumsum(neg_block, dim=0) - neg_block  # negative weight before the block
    group_zero = torch.zeros(n_groups, dtype=torch.double)
    first = torch.full((n_groups,), n_blocks, dtype=torch.long).scatter_reduce_(
        0, block_group, torch.arange(n_blocks), reduce="amin"
    )
    below = below - below[first.clamp(max=n_blocks - 1)][block_group]
    wins = group_zero.index_add(0, block_group, pos_block * (below + 0.5 * neg_block))
    pos_total = group_zero.index_add(0, block_group, pos_block)
    neg_total = group_zero.index_add(0, block_group, neg_block)
    blocks = torch.zeros(n_groups, dtype=torch.long).index_add_(
        0, block_group, torch.ones_like(block_group)
    )
    counts = (pos_total > 0) & (neg_total > 0) & (blocks > 1)
    auc = torch.where(counts, wins / (pos_total * neg_total).clamp(min=1e-300), group_zero)
    return auc, counts


def get_auc_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None, num_candidates: Tensor
) -> dict[str, Tensor]:
    """Per task: the sum of the counted groups' AUC (`auc_sum`) and their count
    (`num_samples`), from (n_tasks, B) inputs."""
    sizes = group_sizes(num_candidates, labels.shape[-1])
    group = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    w = torch.ones_like(labels) if weights is None else weights
    auc_sum, counted = [], []
    for task in range(labels.shape[0]):
        auc, counts = _group_aucs(
            predictions[task].double(), labels[task].double(), w[task], group, len(sizes)
        )
        auc_sum.append(auc.sum())
        counted.append(counts.sum().double())
    empty = torch.zeros(0, dtype=torch.double)
    return {
        "auc_sum": torch.stack(auc_sum) if auc_sum else empty,
        "num_samples": torch.stack(counted) if counted else empty,
    }


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
