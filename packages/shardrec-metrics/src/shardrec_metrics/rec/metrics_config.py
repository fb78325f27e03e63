"""TorchRec's metric configuration: tasks, metric definitions, the module config, batch stages.

A `MetricsConfig` names the tasks (`RecTaskInfo`: which model outputs hold a task's labels,
predictions and weights) and, per metric (`RecMetricEnum`), a `RecMetricDef` with its tasks and
its global window size in samples (each rank keeps `ceil(window_size / world_size)`).
`generate_metric_module` turns it into a `RecMetricModule`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from shardrec_metrics.rec.metrics_namespace import StrValueMixin

__all__ = [
    "BatchSizeStage",
    "DefaultMetricsConfig",
    "DefaultTaskInfo",
    "EmptyMetricsConfig",
    "MetricsConfig",
    "RecComputeMode",
    "RecMetricDef",
    "RecMetricEnum",
    "RecMetricEnumBase",
    "RecTaskInfo",
    "SessionMetricDef",
    "StateMetricEnum",
    "ThroughputDef",
    "validate_batch_size_stages",
]


class RecMetricEnumBase(StrValueMixin, Enum):
    """Base of metric enums."""


# TorchRec's public enum, member for member. Its names repeat MetricNamespace's (and
# MetricName's) in long runs, but the three are separate enums in TorchRec whose values differ
# in places ("log_loss" / "logloss", "tower_qps" / "qps"), so each is written out.
class RecMetricEnum(RecMetricEnumBase):
    NE = "ne"
    NE_POSITIVE = "ne_positive"
    RECALIBRATED_NE = "recalibrated_ne"
    RECALIBRATED_CALIBRATION = "recalibrated_calibration"
    SEGMENTED_NE = "segmented_ne"
    LOG_LOSS = "log_loss"
    CTR = "ctr"
    AUC = "auc"
    AUPRC = "auprc"
    RAUC = "rauc"
    CALIBRATION = "calibration"
    MSE = "mse"
    MAE = "mae"
    MULTICLASS_RECALL = "multiclass_recall"
    RECALL_SESSION_LEVEL = "recall_session_level"
    PRECISION_SESSION_LEVEL = "precision_session_level"
    WEIGHTED_AVG = "weighted_avg"
    TOWER_QPS = "tower_qps"
    ACCURACY = "accuracy"
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
    NMSE = "nmse"
    AVERAGE = "average"
    MULTI_LABEL_PRECISION = "multi_label_precision"
    NUM_POSITIVE_SAMPLES = "num_positive_samples"
    SUM_WEIGHTS = "sum_weights"
    NUM_MISSING_LABELS = "num_missing_labels"
    WEIGHTED_SUM_PREDICTIONS = "weighted_sum_predictions"


@dataclass(unsafe_hash=True, eq=True)
class SessionMetricDef:
    """Session-level metric settings (kept for TorchRec's `RecTaskInfo` signature)."""

    session_var_name: str
    top_threshold: int | None = None
    run_ranking_of_labels: bool = False


@dataclass(unsafe_hash=True, eq=True)
class RecTaskInfo:
    """One task: the model-output keys of its labels, predictions and weights."""

    name: str = "DefaultTask"
    label_name: str = "label"
    prediction_name: str = "prediction"
    weight_name: str = "weight"
    session_metric_def: SessionMetricDef | None = None
    is_negative_task: bool = False
    tensor_name: str | None = None
    weighted: bool = True


class RecComputeMode(Enum):
    """How a metric lays out its tasks.

    FUSED_TASKS_COMPUTATION: one computation holds every task as a row of (n_tasks, B) states
    (inputs may be (n_tasks, B) tensors); UNFUSED_TASKS_COMPUTATION: one computation per task;
    FUSED_TASKS_AND_STATES_COMPUTATION: as fused tasks (states are summed in one collective
    either way here).
    """

    FUSED_TASKS_COMPUTATION = 1
    UNFUSED_TASKS_COMPUTATION = 2
    FUSED_TASKS_AND_STATES_COMPUTATION = 3


_DEFAULT_WINDOW_SIZE = 10_000_000
_DEFAULT_THROUGHPUT_WINDOW_SECONDS = 100
_DEFAULT_THROUGHPUT_WARMUP_STEPS = 100


@dataclass
class RecMetricDef:
    """One metric's tasks (`rec_tasks`, or `rec_task_indices` into `MetricsConfig.rec_tasks`),
    its global window size in samples and its extra constructor `arguments`."""

    rec_tasks: list[RecTaskInfo] = field(default_factory=list)
    rec_task_indices: list[int] = field(default_factory=list)
    window_size: int = _DEFAULT_WINDOW_SIZE
    arguments: dict[str, Any] | None = None


class StateMetricEnum(StrValueMixin, Enum):
    OPTIMIZERS = "optimizers"
    MODEL_CONFIGURATOR = "model_configurator"


@dataclass
class ThroughputDef:
    """`window_size` in seconds, `warmup_steps` batches before throughput is measured."""

    window_size: int = _DEFAULT_THROUGHPUT_WINDOW_SECONDS
    warmup_steps: int = _DEFAULT_THROUGHPUT_WARMUP_STEPS


@dataclass
class MetricsConfig:
    """What `generate_metric_module` builds (TorchRec's fields and defaults)."""

    rec_tasks: list[RecTaskInfo] = field(default_factory=list)
    rec_metrics: dict[RecMetricEnum, RecMetricDef] = field(default_factory=dict)
    throughput_metric: ThroughputDef | None = None
    rec_compute_mode: RecComputeMode = RecComputeMode.UNFUSED_TASKS_COMPUTATION
    fused_update_limit: int = 0
    state_metrics: list[StateMetricEnum] = field(default_factory=list)
    compute_interval_steps: int = 100
    min_compute_interval: float = 0.0
    max_compute_interval: float = math.inf
    compute_on_all_ranks: bool = False
    should_validate_update: bool = False
    enable_pt2_compile: bool = False
    should_clone_update_inputs: bool = False
    use_cpu_offloaded_rec_metric_module: bool | None = None

    def __post_init__(self) -> None:
        for metric, definition in self.rec_metrics.items():
            if definition.rec_task_indices and self.rec_tasks is None:
                raise ValueError(
                    f"rec_task_indices {definition.rec_task_indices} is specified, but rec_tasks "
                    f"is None for metric {metric}: give MetricsConfig.rec_tasks"
                )
            for idx in definition.rec_task_indices:
                if not 0 <= idx < len(self.rec_tasks):
                    raise ValueError(
                        f"rec_task_indices {idx} is out of range of {len(self.rec_tasks)} tasks "
                        f"for metric {metric}: index into MetricsConfig.rec_tasks"
                    )


DefaultTaskInfo = RecTaskInfo(
    name="DefaultTask", label_name="label", prediction_name="prediction", weight_name="weight"
)

DefaultMetricsConfig = MetricsConfig(
    rec_tasks=[DefaultTaskInfo],
    rec_metrics={
        RecMetricEnum.NE: RecMetricDef(
            rec_tasks=[DefaultTaskInfo], window_size=_DEFAULT_WINDOW_SIZE
        )
    },
    throughput_metric=ThroughputDef(),
    state_metrics=[],
)

EmptyMetricsConfig = MetricsConfig(rec_tasks=[], rec_metrics={}, throughput_metric=None)


@dataclass
class BatchSizeStage:
    """A batch size used until iteration `max_iters` (None: from then on, the last stage)."""

    batch_size: int = 0
    max_iters: int | None = 0


def validate_batch_size_stages(batch_size_stages: list[BatchSizeStage] | None) -> None:
    """Stages must end with `max_iters=None` and have increasing `max_iters` before it."""
    if not batch_size_stages:
        return
    if batch_size_stages[-1].max_iters is not None:
        raise ValueError(
            "Batch size stages last stage should have max_iters = None, but get "
            f"{batch_size_stages[-1].max_iters}"
        )
    limits = [s.max_iters for s in batch_size_stages[:-1]]
    for i, limit in enumerate(limits):
        if limit is None:
            raise ValueError(
                f"only the last batch size stage may have max_iters None, stage {i} has"
            )
        if i and limit <= (limits[i - 1] or 0):
            raise ValueError(
                f"Batch size stages max_iters should be in ascending order, got {limits}"
            )
