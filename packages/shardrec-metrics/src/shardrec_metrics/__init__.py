"""Recommendation metrics that are exact across ranks: AUC, NE, log loss, accuracy, throughput."""

from shardrec_metrics.accuracy import Accuracy
from shardrec_metrics.auc import AUC, roc_auc
from shardrec_metrics.collection import MetricCollection
from shardrec_metrics.log_loss import LogLoss
from shardrec_metrics.ne import NE
from shardrec_metrics.rec_metric import RecMetric
from shardrec_metrics.throughput import Throughput

__all__ = [
    "AUC",
    "NE",
    "Accuracy",
    "LogLoss",
    "MetricCollection",
    "RecMetric",
    "Throughput",
    "roc_auc",
]
