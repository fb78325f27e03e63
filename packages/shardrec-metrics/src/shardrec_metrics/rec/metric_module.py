"""TorchRec's RecMetricModule: every configured metric fed from the model output each batch.

metrics = generate_metric_module(RecMetricModule, metrics_config, batch_size, world_size,
                                 my_rank, state_metrics_mapping={}, device=device)
metrics.update(model_out)            # {"label": (B,), "prediction": (B,), "weight": (B,)}
if metrics.should_compute():
    values = metrics.compute()       # collective: every rank calls it
    # {"ne-DefaultTask|lifetime_ne": tensor(0.93), ..., "throughput-throughput|total_examples": ...}
"""

from __future__ import annotations

import abc
import logging
import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv, all_gather_ints
from shardrec_metrics._comm import resolve_group
from shardrec_metrics.rec._reductions import gather_state, reduce_gathered
from shardrec_metrics.rec.accuracy import AccuracyMetric
from shardrec_metrics.rec.auc import AUCMetric
from shardrec_metrics.rec.auprc import AUPRCMetric
from shardrec_metrics.rec.average import AverageMetric
from shardrec_metrics.rec.cali_free_ne import CaliFreeNEMetric
from shardrec_metrics.rec.calibration import CalibrationMetric
from shardrec_metrics.rec.calibration_with_recalibration import RecalibratedCalibrationMetric
from shardrec_metrics.rec.ctr import CTRMetric
from shardrec_metrics.rec.events import EventLoggingHandler, TorchrecComponent
from shardrec_metrics.rec.hindsight_target_pr import HindsightTargetPRMetric
from shardrec_metrics.rec.mae import MAEMetric
from shardrec_metrics.rec.metrics_config import (
    BatchSizeStage,
    MetricsConfig,
    RecMetricEnum,
    RecMetricEnumBase,
    RecTaskInfo,
    StateMetricEnum,
    validate_batch_size_stages,
)
from shardrec_metrics.rec.metrics_namespace import (
    MetricNamespace,
    compose_customized_metric_key,
    compose_metric_namespace,
)
from shardrec_metrics.rec.model_utils import parse_task_model_outputs
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.multi_label_precision import MultiLabelPrecisionMetric
from shardrec_metrics.rec.multiclass_recall import MulticlassRecallMetric
from shardrec_metrics.rec.ndcg import NDCGMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.ne_positive import NEPositiveMetric
from shardrec_metrics.rec.ne_with_recalibration import RecalibratedNEMetric
from shardrec_metrics.rec.nmse import NMSEMetric
from shardrec_metrics.rec.num_missing_labels import NumMissingLabelsMetric
from shardrec_metrics.rec.num_positive_samples import NumPositiveSamplesMetric
from shardrec_metrics.rec.output import OutputMetric
from shardrec_metrics.rec.precision import PrecisionMetric
from shardrec_metrics.rec.precision_session import PrecisionSessionMetric
from shardrec_metrics.rec.rauc import RAUCMetric
from shardrec_metrics.rec.rec_metric import (
    RecMetric,
    RecMetricComputation,
    RecMetricException,
    RecMetricList,
)
from shardrec_metrics.rec.recall import RecallMetric
from shardrec_metrics.rec.recall_session import RecallSessionMetric
from shardrec_metrics.rec.scalar import ScalarMetric
from shardrec_metrics.rec.segmented_ne import SegmentedNEMetric
from shardrec_metrics.rec.serving_calibration import ServingCalibrationMetric
from shardrec_metrics.rec.serving_ne import ServingNEMetric
from shardrec_metrics.rec.sum_weights import SumWeightsMetric
from shardrec_metrics.rec.tensor_weighted_avg import TensorWeightedAvgMetric
from shardrec_metrics.rec.throughput import ThroughputMetric
from shardrec_metrics.rec.tower_qps import TowerQPSMetric
from shardrec_metrics.rec.unweighted_ne import UnweightedNEMetric
from shardrec_metrics.rec.weighted_avg import WeightedAvgMetric
from shardrec_metrics.rec.weighted_sum_predictions import WeightedSumPredictionsMetric
from shardrec_metrics.rec.xauc import XAUCMetric

__all__ = [
    "REC_METRICS_MAPPING",
    "STATE_METRICS_NAMESPACE_MAPPING",
    "MetricValue",
    "MetricsResult",
    "RecMetricModule",
    "StateMetric",
    "generate_metric_module",
]

logger = logging.getLogger(__name__)

MetricValue = Tensor | float
MetricsResult = dict[str, MetricValue]

REC_METRICS_MAPPING: dict[RecMetricEnumBase, type[RecMetric]] = {
    RecMetricEnum.NE: NEMetric,
    RecMetricEnum.NE_POSITIVE: NEPositiveMetric,
    RecMetricEnum.SEGMENTED_NE: SegmentedNEMetric,
    RecMetricEnum.RECALIBRATED_NE: RecalibratedNEMetric,
    RecMetricEnum.RECALIBRATED_CALIBRATION: RecalibratedCalibrationMetric,
    RecMetricEnum.CTR: CTRMetric,
    RecMetricEnum.CALIBRATION: CalibrationMetric,
    RecMetricEnum.AUC: AUCMetric,
    RecMetricEnum.AUPRC: AUPRCMetric,
    RecMetricEnum.RAUC: RAUCMetric,
    RecMetricEnum.MSE: MSEMetric,
    RecMetricEnum.MAE: MAEMetric,
    RecMetricEnum.MULTICLASS_RECALL: MulticlassRecallMetric,
    RecMetricEnum.WEIGHTED_AVG: WeightedAvgMetric,
    RecMetricEnum.TOWER_QPS: TowerQPSMetric,
    RecMetricEnum.RECALL_SESSION_LEVEL: RecallSessionMetric,
    RecMetricEnum.PRECISION_SESSION_LEVEL: PrecisionSessionMetric,
    RecMetricEnum.ACCURACY: AccuracyMetric,
    RecMetricEnum.NDCG: NDCGMetric,
    RecMetricEnum.XAUC: XAUCMetric,
    RecMetricEnum.SCALAR: ScalarMetric,
    RecMetricEnum.PRECISION: PrecisionMetric,
    RecMetricEnum.RECALL: RecallMetric,
    RecMetricEnum.SERVING_NE: ServingNEMetric,
    RecMetricEnum.SERVING_CALIBRATION: ServingCalibrationMetric,
    RecMetricEnum.OUTPUT: OutputMetric,
    RecMetricEnum.TENSOR_WEIGHTED_AVG: TensorWeightedAvgMetric,
    RecMetricEnum.CALI_FREE_NE: CaliFreeNEMetric,
    RecMetricEnum.UNWEIGHTED_NE: UnweightedNEMetric,
    RecMetricEnum.HINDSIGHT_TARGET_PR: HindsightTargetPRMetric,
    RecMetricEnum.NMSE: NMSEMetric,
    RecMetricEnum.AVERAGE: AverageMetric,
    RecMetricEnum.MULTI_LABEL_PRECISION: MultiLabelPrecisionMetric,
    RecMetricEnum.NUM_MISSING_LABELS: NumMissingLabelsMetric,
    RecMetricEnum.WEIGHTED_SUM_PREDICTIONS: WeightedSumPredictionsMetric,
    RecMetricEnum.NUM_POSITIVE_SAMPLES: NumPositiveSamplesMetric,
    RecMetricEnum.SUM_WEIGHTS: SumWeightsMetric,
}
"""Every metric of TorchRec 1.8's mapping, under the same enum members and class names, in
TorchRec's order (a config built from it numbers its metrics, and their state-dict keys, as
TorchRec's)."""

STATE_METRICS_NAMESPACE_MAPPING: dict[StateMetricEnum, MetricNamespace] = {
    StateMetricEnum.OPTIMIZERS: MetricNamespace.OPTIMIZERS,
    StateMetricEnum.MODEL_CONFIGURATOR: MetricNamespace.MODEL_CONFIGURATOR,
}


class StateMetric(abc.ABC):
    """A component (optimizer, configurator) that reports its own metrics."""

    @abc.abstractmethod
    def get_metrics(self) -> MetricsResult:
        """{metric name: value}."""


class RecMetricModule(nn.Module):
    """The RecMetrics, the throughput metric and state metrics of one trainer."""

    def __init__(
        self,
        batch_size: int,
        world_size: int,
        rec_tasks: list[RecTaskInfo] | None = None,
        rec_metrics: RecMetricList | None = None,
        throughput_metric: ThroughputMetric | None = None,
        state_metrics: dict[str, StateMetric] | None = None,
        compute_interval_steps: int = 100,
        min_compute_interval: float = 0.0,
        max_compute_interval: float = math.inf,
    ) -> None:
        super().__init__()
        self.rec_tasks = rec_tasks or []
        self.rec_metrics = rec_metrics if rec_metrics is not None else RecMetricList([])
        self.throughput_metric = throughput_metric
        self.state_metrics = state_metrics or {}
        self.trained_batches = 0
        self.batch_size = batch_size
        self.world_size = world_size
        self.oom_count = 0
        self.compute_count = 0
        self.compute_interval_steps = compute_interval_steps
        self.min_compute_interval = min_compute_interval
        self.max_compute_interval = max_compute_interval
        if min_compute_interval == 0.0 and max_compute_interval == math.inf:
            self.min_compute_interval = self.max_compute_interval = -1.0  # fixed interval
        else:
            if max_compute_interval <= 0.0:
                raise ValueError("Max compute interval should not be smaller than 0.0.")
            if min_compute_interval < 0.0:
                raise ValueError("Min compute interval should not be smaller than 0.0.")
        self.last_compute_time = -1.0
        self._register_load_state_dict_pre_hook(_drop_trained_batches)  # type: ignore[no-untyped-call]

    def _update_rec_metrics(self, model_out: dict[str, Tensor], **kwargs: Any) -> None:
        if self.rec_metrics and self.rec_tasks:
            labels, predictions, weights, required = parse_task_model_outputs(
                self.rec_tasks, model_out, self.get_required_inputs()
            )
            if required:
                kwargs["required_inputs"] = required
            self.rec_metrics.update(
                predictions=predictions, labels=labels, weights=weights, **kwargs
            )

    @EventLoggingHandler.event_logger(TorchrecComponent.REC_METRICS)
    def update(self, model_out: dict[str, Tensor], **kwargs: Any) -> None:
        """Add one batch's model output (every task's label, prediction and weight keys)."""
        self._update_rec_metrics(model_out, **kwargs)
        if self.throughput_metric is not None:
            self.throughput_metric.update()
        self.trained_batches += 1

    def _adjust_compute_interval(self) -> None:
        """After the second compute, size the step interval to land within the time bounds."""
        if self.last_compute_time > 0 and self.min_compute_interval >= 0:
            interval = time.time() - self.last_compute_time
            if not self.max_compute_interval >= interval >= self.min_compute_interval:
                per_step = interval / self.compute_interval_steps
                if self.max_compute_interval == math.inf:
                    target = self.min_compute_interval + 1.0
                elif self.min_compute_interval == 0.0:
                    target = self.max_compute_interval - (
                        0.0 if self.max_compute_interval <= 1.0 else 1.0
                    )
                else:
                    target = (self.max_compute_interval + self.min_compute_interval) / 2
                steps = int(target / per_step)
                if dist.is_available() and dist.is_initialized():
                    # every rank must compute at the same step: take the largest interval
                    world = dist.group.WORLD
                    assert world is not None
                    env = ShardingEnv.from_process_group(world)
                    steps = max(all_gather_ints(env, steps))
                self.compute_interval_steps = max(steps, 1)
            self.min_compute_interval = self.max_compute_interval = -1.0
        self.last_compute_time = time.time()

    def should_compute(self) -> bool:
        return self.trained_batches % self.compute_interval_steps == 0

    @EventLoggingHandler.event_logger(TorchrecComponent.REC_METRICS)
    def compute(self) -> dict[str, MetricValue]:
        """Every metric's values (a collective for the RecMetrics: call it on every rank)."""
        self.compute_count += 1
        out: dict[str, MetricValue] = {}
        # truthiness as TorchRec (an empty RecMetricList is falsy through its len; a stand-in
        # list, e.g. a test's mock, is truthy)
        if self.rec_metrics:
            self._adjust_compute_interval()
            out.update(self.rec_metrics.compute())
        if self.throughput_metric is not None:
            out.update(self.throughput_metric.compute())
        for namespace, component in self.state_metrics.items():
            for name, value in component.get_metrics().items():
                out[compose_customized_metric_key(namespace, name)] = value
        return out

    def local_compute(self) -> dict[str, MetricValue]:
        """This rank's RecMetric values (`...|local_...` keys), without communication."""
        return dict(self.rec_metrics.local_compute()) if self.rec_metrics else {}

    def sync(self) -> None:
        self.rec_metrics.sync()

    def unsync(self) -> None:
        self.rec_metrics.unsync()

    def reset(self) -> None:
        self.rec_metrics.reset()

    def get_required_inputs(self) -> list[str] | None:
        return self.rec_metrics.get_required_inputs()

    def _get_metric_states(
        self,
        metric: RecMetric,
        world_size: int,
        process_group: dist.ProcessGroup | None,
    ) -> dict[str, dict[str, Any]]:
        """`{task name: {state name: value over every rank}}` of one metric (a collective):
        each state gathered from every rank, then reduced by its reduction (a sum for the sum
        states; one tensor of every rank's samples for the sample states)."""
        group = process_group if process_group is not None else resolve_group(None)
        if group is not None and dist.get_world_size(group) != world_size:
            raise ValueError(
                f"world_size {world_size} is not the process group's size "
                f"{dist.get_world_size(group)}; pass the group the metric runs on"
            )
        out: dict[str, dict[str, Any]] = {}
        for task, computation in zip(metric._tasks, metric._metrics_computations, strict=False):
            assert isinstance(computation, RecMetricComputation)
            if computation._synced is None:
                computation._refresh_windows()  # the window states as of now
            states = out.setdefault(task.name, {})
            for name, reduction in computation._reductions.items():
                value = getattr(computation, name)
                if isinstance(value, list):
                    if not value:
                        states[name] = []
                        continue
                    gathered: Any = gather_state(torch.cat(value, dim=-1), group)
                else:
                    gathered = torch.stack(gather_state(value, group))
                states[name] = reduce_gathered(reduction, gathered)
        return out

    def get_pre_compute_states(
        self, pg: dist.ProcessGroup | None = None
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Every metric's states over all ranks, `{namespace: {task: {state: value}}}` (the
        throughput metric's buffers under its namespace and name); a collective, the same on
        every rank. `load_pre_compute_states` of a one-rank module then computes the values this
        module's `compute()` gives."""
        group = pg if pg is not None else resolve_group(None)
        world = dist.get_world_size(group) if group is not None else 1
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for metric in self.rec_metrics.rec_metrics:
            assert isinstance(metric, RecMetric)
            out[metric._namespace.value] = self._get_metric_states(metric, world, group)
        if self.throughput_metric is not None:
            t = self.throughput_metric
            out.setdefault(t._namespace.value, {})[t._metric_name.value] = dict(t.named_buffers())
        return out

    def load_pre_compute_states(self, source: dict[str, dict[str, dict[str, Any]]]) -> None:
        """Take the states `get_pre_compute_states` returned (no communication)."""
        for metric in self.rec_metrics.rec_metrics:
            assert isinstance(metric, RecMetric)
            states = source[metric._namespace.value]
            for task, computation in zip(metric._tasks, metric._metrics_computations, strict=False):
                assert isinstance(computation, RecMetricComputation)
                computation.load_states(states[task.name])
        if self.throughput_metric is not None:
            t = self.throughput_metric
            buffers = source[t._namespace.value][t._metric_name.value]
            for name, buf in t.named_buffers():
                buf.copy_(buffers[name])

    def shutdown(self) -> None:
        """Release what the module holds (nothing here: every computation is synchronous; an
        asynchronous module stops its workers)."""
        logger.info("RecMetricModule shutdown: nothing to stop")

    def async_compute(self) -> dict[str, MetricValue]:
        """TorchRec's asynchronous compute is not offered by this module (as TorchRec's own
        RecMetricModule): call `compute()`."""
        raise RecMetricException("async_compute is not supported in RecMetricModule")


def _drop_trained_batches(
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: dict[str, Any],
    strict: bool,
    missing_keys: list[str],
    unexpected_keys: list[str],
    error_msgs: list[str],
) -> None:
    """Checkpoints of older TorchRec modules hold `_trained_batches`; it is not state here."""
    state_dict.pop(f"{prefix}_trained_batches", None)


def _generate_rec_metrics(
    metrics_config: MetricsConfig,
    world_size: int,
    my_rank: int,
    batch_size: int,
    process_group: dist.ProcessGroup | None = None,
    batch_size_stages: list[BatchSizeStage] | None = None,
) -> RecMetricList:
    metrics: list[RecMetric] = []
    # What every metric of the config is built with; each adds its tasks, window and arguments.
    shared: dict[str, Any] = {
        "world_size": world_size,
        "my_rank": my_rank,
        "batch_size": batch_size,
        "compute_mode": metrics_config.rec_compute_mode,
        "fused_update_limit": metrics_config.fused_update_limit,
        "compute_on_all_ranks": metrics_config.compute_on_all_ranks,
        "should_validate_update": metrics_config.should_validate_update,
        "process_group": process_group,
        "batch_size_stages": batch_size_stages,  # tower QPS keeps them; the others drop them
    }
    for metric, definition in metrics_config.rec_metrics.items():
        if metric not in REC_METRICS_MAPPING:
            raise ValueError(
                f"metric {metric} is not implemented by shardrec; available: "
                f"{', '.join(str(m) for m in REC_METRICS_MAPPING)}"
            )
        kwargs: dict[str, Any] = dict(definition.arguments or {})
        if definition.rec_tasks and definition.rec_task_indices:
            raise ValueError(
                "Only one of RecMetricDef.rec_tasks and RecMetricDef.rec_task_indices "
                "should be specified."
            )
        if definition.rec_tasks:
            tasks = list(definition.rec_tasks)
        elif definition.rec_task_indices:
            tasks = [metrics_config.rec_tasks[i] for i in definition.rec_task_indices]
        else:
            raise ValueError(
                "One of RecMetricDef.rec_tasks and RecMetricDef.rec_task_indices "
                "should be a non-empty list"
            )
        metrics.append(
            REC_METRICS_MAPPING[metric](
                tasks=tasks, window_size=definition.window_size, **shared, **kwargs
            )
        )
    return RecMetricList(metrics)


def _generate_state_metrics(
    metrics_config: MetricsConfig, state_metrics_mapping: dict[StateMetricEnum, StateMetric]
) -> dict[str, StateMetric]:
    out: dict[str, StateMetric] = {}
    for metric in metrics_config.state_metrics:
        namespace = STATE_METRICS_NAMESPACE_MAPPING.get(metric)
        if namespace is None:
            raise ValueError(f"Unknown StateMetrics {metric}")
        out[compose_metric_namespace(namespace, str(namespace))] = state_metrics_mapping[metric]
    return out


def generate_metric_module(
    metric_class: type[RecMetricModule],
    metrics_config: MetricsConfig,
    batch_size: int,
    world_size: int,
    my_rank: int,
    state_metrics_mapping: dict[StateMetricEnum, StateMetric],
    device: torch.device | str,
    process_group: dist.ProcessGroup | None = None,
    batch_size_stages: list[BatchSizeStage] | None = None,
    module_kwargs: dict[str, Any] | None = None,
) -> RecMetricModule:
    """Build `metric_class` from `metrics_config` (TorchRec's signature), on `device`."""
    validate_batch_size_stages(batch_size_stages)
    rec_metrics = _generate_rec_metrics(
        metrics_config, world_size, my_rank, batch_size, process_group, batch_size_stages
    )
    throughput = None
    if metrics_config.throughput_metric is not None:
        throughput = ThroughputMetric(
            batch_size=batch_size,
            world_size=world_size,
            window_seconds=metrics_config.throughput_metric.window_size,
            warmup_steps=metrics_config.throughput_metric.warmup_steps,
            batch_size_stages=batch_size_stages,
        )
    module = metric_class(
        batch_size=batch_size,
        world_size=world_size,
        rec_tasks=metrics_config.rec_tasks,
        rec_metrics=rec_metrics,
        throughput_metric=throughput,
        state_metrics=_generate_state_metrics(metrics_config, state_metrics_mapping),
        compute_interval_steps=metrics_config.compute_interval_steps,
        min_compute_interval=metrics_config.min_compute_interval,
        max_compute_interval=metrics_config.max_compute_interval,
        **(module_kwargs or {}),
    )
    module.to(device)
    return module
