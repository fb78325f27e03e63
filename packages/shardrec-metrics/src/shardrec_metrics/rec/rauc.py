"""RAUC (regression AUC) over the window of samples: the share of sample pairs that the
predictions order the same way as the labels.

Samples are sorted by (prediction, label); RAUC = 1 - inversions / (n (n - 1) / 2), where an
inversion is a pair i < j (in that order) whose labels satisfy label_i > label_j. Weights are
not used (as TorchRec). Window only, as TorchRec. With `grouped_rauc=True` also
`window_grouped_rauc`: the mean over the window's groups (required input `grouping_keys`, one
key per sample) of each group's RAUC, as TorchRec.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sample_window import (
    SampleWindowComputation,
    SampleWindowMetric,
    each_task,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace

__all__ = ["RAUCMetric", "RAUCMetricComputation", "compute_rauc", "count_inversions"]


def count_inversions(values: list[float]) -> int:
    """Pairs i < j with values[i] > values[j], in O(n log n) (a Fenwick tree over value ranks)."""
    ranks = {v: r for r, v in enumerate(sorted(set(values)), start=1)}
    tree = [0] * (len(ranks) + 1)
    inversions = 0
    for seen, v in enumerate(values):
        r = ranks[v]
        at_most = 0  # earlier values <= v
        i = r
        while i > 0:
            at_most += tree[i]
            i -= i & -i
        inversions += seen - at_most
        i = r
        while i < len(tree):
            tree[i] += 1
            i += i & -i
    return inversions


def _rauc(predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    n = predictions.numel()
    ordered = [
        y
        for y, _ in sorted(
            zip(labels.tolist(), predictions.tolist(), strict=True), key=lambda s: (s[1], s[0])
        )
    ]
    pairs = n * (n - 1) / 2
    # float32, as TorchRec (a default-dtype tensor of the Python value)
    return torch.tensor(1 - count_inversions(ordered) / pairs, dtype=torch.float32)


def compute_rauc(
    n_tasks: int,
    predictions: list[Tensor] | Tensor,
    labels: list[Tensor] | Tensor,
    weights: list[Tensor] | Tensor,
) -> Tensor:
    """(n_tasks,) RAUC of (n_tasks, N) samples (or lists of such blocks, concatenated)."""
    return each_task(_rauc, n_tasks, predictions, labels, weights)


class RAUCMetricComputation(SampleWindowComputation):
    _metric_name = MetricName.RAUC
    _of_samples = staticmethod(_rauc)
    _grouped_report = MetricName.GROUPED_RAUC


class RAUCMetric(SampleWindowMetric):
    _namespace = MetricNamespace.RAUC
    _computation_class = RAUCMetricComputation
