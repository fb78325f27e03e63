"""AUPRC over the window of samples: the area under the precision-recall curve.

Samples are ranked by descending prediction; at every distinct prediction (a threshold) the
weighted precision and recall of "predicted >= threshold" give a point, and the area is the
step sum over recall of precision (TorchRec's Riemann sum, with the (recall 0, precision 1)
start; an undefined recall counts 0 and an undefined precision 1, as TorchRec). No samples
give 0. With `grouped_auprc=True` also `window_grouped_auprc`: the mean over the window's
groups (required input `grouping_keys`, one key per sample) of each group's AUPRC, as TorchRec.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from shardrec_metrics.rec._sample_window import (
    SampleWindowComputation,
    SampleWindowMetric,
    each_task,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace

__all__ = ["AUPRCMetric", "AUPRCMetricComputation", "compute_auprc"]


def _auprc(predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    if predictions.numel() == 0:
        return torch.tensor(0.0, dtype=torch.double)
    order = torch.argsort(predictions.double(), descending=True)
    scores = predictions.double()[order]
    y = labels.double()[order]
    w = weights.double()[order]
    last_of_run = F.pad(scores.diff() != 0, [0, 1], value=True)
    tp = torch.cumsum(w * y, dim=0)[last_of_run]
    fp = torch.cumsum(w * (1.0 - y), dim=0)[last_of_run]
    precision = torch.nan_to_num((tp / (tp + fp)).flip(0), nan=1.0)
    recall = torch.nan_to_num((tp / tp[-1]).flip(0), nan=0.0)
    precision = torch.cat([precision, precision.new_ones(1)])
    recall = torch.cat([recall, recall.new_zeros(1)])
    return -torch.sum((recall[1:] - recall[:-1]) * precision[:-1])


def compute_auprc(n_tasks: int, predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """(n_tasks,) AUPRC of (n_tasks, N) samples."""
    return each_task(_auprc, n_tasks, predictions, labels, weights)


class AUPRCMetricComputation(SampleWindowComputation):
    _metric_name = MetricName.AUPRC
    _of_samples = staticmethod(_auprc)
    _grouped_report = MetricName.GROUPED_AUPRC


class AUPRCMetric(SampleWindowMetric):
    _namespace = MetricNamespace.AUPRC
    _computation_class = AUPRCMetricComputation
