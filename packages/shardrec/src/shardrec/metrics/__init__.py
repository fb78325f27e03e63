"""Metrics exact across ranks (TorchRec path `torchrec.metrics`)."""

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
