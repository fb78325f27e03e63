"""Exact ROC AUC, across ranks equal to the AUC of every rank's samples pooled.

    AUC = sum over positive i, negative j of w_i w_j ([s_i > s_j] + 0.5 [s_i == s_j]) / (P N)

with P, N the positive and negative weight: the probability that a random positive outranks a
random negative, ties counting one half (scikit-learn's `roc_auc_score`, weights included). It
is computed in O(n log n): group samples by distinct score in ascending order, then each group's
positives beat the negative weight of all lower groups and tie with half of their own.

AUC is not a sum over samples, so ranks cannot reduce partial values: `compute` gathers every
rank's (prediction, label, weight) triples, 12 bytes per sample, and each rank ranks the pool.
A single-class input has no pair to rank and gives 0.5 (TorchRec's no-signal value); no samples
give NaN.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._comm import all_gather_columns
from shardrec_metrics._validate import validated_inputs
from shardrec_metrics.rec_metric import NO_SAMPLES, RecMetric

SINGLE_CLASS = 0.5
"""AUC when the samples hold positive weight of one class only."""


def _auc_of_samples(samples: Tensor) -> float:
    """AUC of `samples: (3, n)` = rows of predictions, labels, weights."""
    n = samples.shape[1]
    if n == 0:
        return NO_SAMPLES
    scores, order = torch.sort(samples[0])
    # index_select, not advanced indexing: 3x faster on CPU for 1M samples (10 ms vs 31 ms).
    y = samples[1].index_select(0, order)
    w = samples[2].index_select(0, order)
    pos = w * y  # exact in float32: y is 0 or 1
    neg = w - pos
    # A group is a run of equal scores (contiguous once sorted); `ends` holds each run's last index.
    last = torch.ones(n, dtype=torch.bool, device=samples.device)
    last[:-1] = scores[1:] != scores[:-1]
    ends = last.nonzero().squeeze(1)
    # (G,) weight up to each group's end, accumulated in float64
    pos_through = torch.cumsum(pos, dim=0, dtype=torch.float64).index_select(0, ends)
    neg_through = torch.cumsum(neg, dim=0, dtype=torch.float64).index_select(0, ends)
    pos_group = pos_through.clone()
    pos_group[1:] -= pos_through[:-1]
    neg_group = neg_through.clone()
    neg_group[1:] -= neg_through[:-1]
    wins = torch.dot(pos_group, neg_through - 0.5 * neg_group)
    pos_total, neg_total, won = torch.stack([pos_through[-1], neg_through[-1], wins]).tolist()
    if pos_total + neg_total <= 0:
        return NO_SAMPLES
    if pos_total <= 0 or neg_total <= 0:
        return SINGLE_CLASS
    return float(won / (pos_total * neg_total))


def roc_auc(predictions: Tensor, labels: Tensor, weights: Tensor | None = None) -> float:
    """Exact weighted ROC AUC of one process's samples (ties count one half).

    predictions: (B,) in [0, 1]; labels: (B,) of 0/1; weights: (B,) >= 0 or None.
    0.5 when only one class has weight, NaN when there are no samples.
    """
    p, y, w = validated_inputs(predictions, labels, weights)
    return _auc_of_samples(torch.stack([p, y, w]))


class AUC(RecMetric):
    """Exact ROC AUC, lifetime and window.

    Memory: every sample since `reset` is kept, 12 bytes each (float32 prediction, label,
    weight); a rank that sees 10M samples holds 120 MB, and `compute` gathers
    `world_size * max_rank_samples * 12` bytes on every rank. The window is the tail of the
    same samples, so it costs nothing extra. Call `reset` (e.g. per evaluation) to bound memory.
    """

    name = "auc"

    def __init__(
        self, *, window_size: int = 100_000, process_group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__(window_size=window_size, process_group=process_group)
        self._chunks: list[Tensor] = []  # (3, B_i) float32 samples in arrival order

    def reset(self) -> None:
        self._chunks = []

    @property
    def num_samples(self) -> int:
        """Samples this rank holds (lifetime)."""
        return sum(c.shape[1] for c in self._chunks)

    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        if predictions.numel():
            self._chunks.append(torch.stack([predictions, labels, weights]))

    def _samples(self) -> Tensor:
        if not self._chunks:
            return torch.zeros((3, 0), dtype=torch.float32)
        if len(self._chunks) > 1:
            # Concatenate once and keep the result: later computes only add the new batches.
            self._chunks = [torch.cat(self._chunks, dim=1)]
        return self._chunks[0]

    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        samples = self._samples()
        per_rank = [samples] if group is None else all_gather_columns(samples, group)
        pooled = per_rank[0] if len(per_rank) == 1 else torch.cat(per_rank, dim=1)
        lifetime = _auc_of_samples(pooled)
        if all(s.shape[1] <= self.window_size for s in per_rank):
            return lifetime, lifetime  # every window holds all of its rank's samples
        window = torch.cat([s[:, -self.window_size :] for s in per_rank], dim=1)
        return lifetime, _auc_of_samples(window)
