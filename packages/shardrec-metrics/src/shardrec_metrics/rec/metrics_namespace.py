"""TorchRec's metric key names: `"<namespace>-<task>|<prefix><metric>"`.

    ne-DefaultTask|lifetime_ne        namespace "ne", task "DefaultTask", prefix "lifetime_"
    ne-DefaultTask|local_window_ne    from `local_compute()`: this rank's samples only
    throughput-throughput|total_examples

The enums' values are TorchRec 1.8's, so dashboards keyed on TorchRec's strings keep working.
`str(member)` and f-strings give the value.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "MetricName",
    "MetricNameBase",
    "MetricNamespace",
    "MetricNamespaceBase",
    "MetricPrefix",
    "StrValueMixin",
    "compose_customized_metric_key",
    "compose_metric_key",
    "compose_metric_namespace",
    "task_wildcard_metrics_pattern",
]


class StrValueMixin:
    """`str()` and `format()` of an enum member give its value."""

    value: str

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# MetricName and MetricNamespace are TorchRec's public enums, written out member for member
# (their long common runs are TorchRec's data, see RecMetricEnum in metrics_config.py).
class MetricNameBase(StrValueMixin, Enum):
    """Base of metric-name enums (TorchRec lets users extend the names)."""


class MetricName(MetricNameBase):
    DEFAULT = ""
    NE = "ne"
    NE_POSITIVE = "ne_positive"
    SEGMENTED_NE = "segmented_ne"
    LOG_LOSS = "logloss"
    THROUGHPUT = "throughput"
    TOTAL_EXAMPLES = "total_examples"
    ATTEMPT_EXAMPLES = "attempt_examples"
    BATCH_SIZE = "batch_size"
    CTR = "ctr"
    CALIBRATION = "calibration"
    MSE = "mse"
    MAE = "mae"
    RMSE = "rmse"
    R_SQUARED = "r_squared"
    AUC = "auc"
    GAUC = "gauc"
    AUPRC = "auprc"
    RAUC = "rauc"
    GROUPED_AUC = "grouped_auc"
    GROUPED_AUPRC = "grouped_auprc"
    GROUPED_RAUC = "grouped_rauc"
    RECALL_SESSION_LEVEL = "recall_session_level"
    PRECISION_SESSION_LEVEL = "precision_session_level"
    MULTICLASS_RECALL = "multiclass_recall"
    MULTI_LABEL_PRECISION = "multi_label_precision"
    WEIGHTED_AVG = "weighted_avg"
    TOWER_QPS = "qps"
    ACCURACY = "accuracy"
    NDCG = "ndcg"
    XAUC = "xauc"
    SCALAR = "scalar"
    OUTPUT = "output"
    GAUC_NUM_SAMPLES = "gauc_num_samples"
    TOTAL_POSITIVE_EXAMPLES = "total_positive_examples"
    TOTAL_NEGATIVE_EXAMPLES = "total_negative_examples"
    PRECISION = "precision"
    RECALL = "recall"
    SERVING_NE = "serving_ne"
    SERVING_CALIBRATION = "serving_calibration"
    SERVING_AE_LOSS = "serving_ae_loss"
    TENSOR_WEIGHTED_AVG = "tensor_weighted_avg"
    CALI_FREE_NE = "cali_free_ne"
    UNWEIGHTED_NE = "unweighted_ne"
    HINDSIGHT_TARGET_PR = "hindsight_target_pr"
    HINDSIGHT_TARGET_PRECISION = "hindsight_target_precision"
    HINDSIGHT_TARGET_RECALL = "hindsight_target_recall"
    EFFECTIVE_SAMPLE_RATE = "effective_sample_rate"
    NMSE = "nmse"
    NRMSE = "nrmse"
    DATA_LABEL_AVERAGE = "data_label_average"
    LABEL_AVERAGE = "label_average"
    PREDICTION_AVERAGE = "prediction_average"
    NUM_POSITIVE_SAMPLES = "num_positive_samples"
    SUM_WEIGHTS = "sum_weights"
    NUM_MISSING_LABELS = "num_missing_labels"
    WEIGHTED_SUM_PREDICTIONS = "weighted_sum_predictions"


class MetricNamespaceBase(StrValueMixin, Enum):
    """Base of namespace enums."""


class MetricNamespace(MetricNamespaceBase):
    DEFAULT = ""
    NE = "ne"
    NE_POSITIVE = "ne_positive"
    SEGMENTED_NE = "segmented_ne"
    RECALIBRATED_NE = "recalibrated_ne"
    RECALIBRATED_CALIBRATION = "recalibrated_calibration"
    THROUGHPUT = "throughput"
    CTR = "ctr"
    CALIBRATION = "calibration"
    MSE = "mse"
    AUC = "auc"
    GAUC = "gauc"
    AUPRC = "auprc"
    RAUC = "rauc"
    MAE = "mae"
    ACCURACY = "accuracy"
    OPTIMIZERS = "optimizers"
    MODEL_CONFIGURATOR = "model_configurator"
    MULTICLASS_RECALL = "multiclass_recall"
    MULTI_LABEL_PRECISION = "multi_label_precision"
    WEIGHTED_AVG = "weighted_avg"
    RECALL_SESSION_LEVEL = "recall_session_level"
    PRECISION_SESSION_LEVEL = "precision_session_level"
    TOWER_QPS = "qps"
    NDCG = "ndcg"
    XAUC = "xauc"
    SCALAR = "scalar"
    PRECISION = "precision"
    RECALL = "recall"
    SERVING_NE = "serving_ne"
    SERVING_CALIBRATION = "serving_calibration"
    SERVING_AE_LOSS = "serving_ae_loss"
    OUTPUT = "output"
    TENSOR_WEIGHTED_AVG = "tensor_weighted_avg"
    CALI_FREE_NE = "cali_free_ne"
    UNWEIGHTED_NE = "unweighted_ne"
    HINDSIGHT_TARGET_PR = "hindsight_target_pr"
    EFFECTIVE_RATE = "effective_rate"
    NMSE = "nmse"
    AVERAGE = "average"
    NUM_POSITIVE_SAMPLES = "num_positive_samples"
    SUM_WEIGHTS = "sum_weights"
    NUM_MISSING_LABELS = "num_missing_labels"
    WEIGHTED_SUM_PREDICTIONS = "weighted_sum_predictions"


class MetricPrefix(StrValueMixin, Enum):
    DEFAULT = ""
    LIFETIME = "lifetime_"
    WINDOW = "window_"
    ATTEMPT = "attempt_"


def task_wildcard_metrics_pattern(
    namespace: MetricNamespaceBase,
    metric_name: MetricNameBase,
    metric_prefix: MetricPrefix = MetricPrefix.DEFAULT,
) -> str:
    """A regex matching `metric_name` with `metric_prefix` of `namespace` for any task."""
    return rf"{namespace}-.+\|{metric_prefix}{metric_name}"


def compose_metric_namespace(namespace: MetricNamespaceBase, task_name: str) -> str:
    """`"<namespace>-<task_name>"`."""
    return f"{namespace}-{task_name}"


def compose_customized_metric_key(
    namespace: str, metric_name: str, description: str | None = None
) -> str:
    """`"<namespace>|<metric_name><description>"` (for keys that are not enum members)."""
    return f"{namespace}|{metric_name}{description or ''}"


def compose_metric_key(
    namespace: MetricNamespaceBase,
    task_name: str,
    metric_name: MetricNameBase,
    metric_prefix: MetricPrefix | str = MetricPrefix.DEFAULT,
    description: str | None = None,
) -> str:
    """`"<namespace>-<task>|<prefix><metric><description>"`, e.g. `"ne-ctr|window_ne"`."""
    return compose_customized_metric_key(
        compose_metric_namespace(namespace, task_name),
        f"{metric_prefix}{metric_name}",
        description,
    )
