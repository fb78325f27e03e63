"""TorchRec's RecMetric API (`torchrec.metrics.*`) on shardrec's exact-across-ranks engine."""

from shardrec_metrics.rec.accuracy import AccuracyMetric
from shardrec_metrics.rec.auc import AUCMetric
from shardrec_metrics.rec.auprc import AUPRCMetric
from shardrec_metrics.rec.calibration import CalibrationMetric
from shardrec_metrics.rec.ctr import CTRMetric
from shardrec_metrics.rec.mae import MAEMetric
from shardrec_metrics.rec.metric_module import RecMetricModule, StateMetric, generate_metric_module
from shardrec_metrics.rec.metrics_config import (
    BatchSizeStage,
    MetricsConfig,
    RecComputeMode,
    RecMetricDef,
    RecMetricEnum,
    RecTaskInfo,
    ThroughputDef,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.precision import PrecisionMetric
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricComputation, RecMetricList
from shardrec_metrics.rec.recall import RecallMetric
from shardrec_metrics.rec.throughput import ThroughputMetric
from shardrec_metrics.rec.weighted_avg import WeightedAvgMetric

__all__ = [
    "AUCMetric",
    "AUPRCMetric",
    "AccuracyMetric",
    "BatchSizeStage",
    "CTRMetric",
    "CalibrationMetric",
    "MAEMetric",
    "MSEMetric",
    "MetricName",
    "MetricNamespace",
    "MetricPrefix",
    "MetricsConfig",
    "NEMetric",
    "PrecisionMetric",
    "RecComputeMode",
    "RecMetric",
    "RecMetricComputation",
    "RecMetricDef",
    "RecMetricEnum",
    "RecMetricList",
    "RecMetricModule",
    "RecTaskInfo",
    "RecallMetric",
    "StateMetric",
    "ThroughputDef",
    "ThroughputMetric",
    "WeightedAvgMetric",
    "generate_metric_module",
]
