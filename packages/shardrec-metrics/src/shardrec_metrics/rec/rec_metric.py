"""TorchRec's RecMetric framework: one metric over several tasks, keyed results.

A `RecMetric` owns `RecMetricComputation`s (computation.py): one per task
(UNFUSED_TASKS_COMPUTATION) or one for all tasks (the fused modes), each with a window of
`ceil(window_size / world_size)` samples on this rank. `compute()` is a collective (every rank
calls it); rank 0, or every rank with `compute_on_all_ranks`, gets values over all ranks.
`local_compute()` gives this rank's own. Keys are `"<namespace>-<task>|<prefix><metric>"`
(metrics_namespace.py), e.g. `"ne-DefaultTask|lifetime_ne"`.
"""

from __future__ import annotations

import abc
import collections
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Protocol, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from shardrec_metrics.rec.computation import (
    IGNORED_KWARGS,
    MetricComputationReport,
    RecMetricComputation,
    RecMetricException,
    WindowBuffer,
)
from shardrec_metrics.rec.events import EventLoggingHandler, EventType, TorchrecComponent
from shardrec_metrics.rec.metrics_config import RecComputeMode, RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, compose_metric_key

__all__ = [
    "EventLoggingHandler",
    "MetricComputationReport",
    "RecComputeMode",
    "RecMetric",
    "RecMetricComputation",
    "RecMetricException",
    "RecMetricList",
    "RecModelOutput",
    "RecTaskInfo",
    "WindowBuffer",
]

RecModelOutput = Tensor | dict[str, Tensor]
_FUSED = (RecComputeMode.FUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_AND_STATES_COMPUTATION)


_Report = tuple[RecTaskInfo, MetricName, Tensor, str, str | None]


class _Part(Protocol):
    def sync(self) -> None: ...

    def unsync(self) -> None: ...

    def reset(self) -> None: ...


class _Parts(abc.ABC):
    """`sync`, `unsync` and `reset` of a whole: each of its parts in order (a metric's
    computations, a list's metrics)."""

    @abc.abstractmethod
    def _parts(self) -> Sequence[_Part]:
        """The parts, in the same order on every rank (their sync is a collective)."""

    def sync(self) -> None:
        for part in self._parts():
            part.sync()

    def unsync(self) -> None:
        for part in self._parts():
            part.unsync()

    def reset(self) -> None:
        for part in self._parts():
            part.reset()


class RecMetric(_Parts, nn.Module):
    """One metric over several tasks (TorchRec's constructor, `update`, `compute` and keys).

    Subclasses set `_namespace` and `_computation_class`. `window_size` is global (samples over
    all ranks); each rank keeps `ceil(window_size / world_size)`, which must be at least
    `batch_size`.
    """

    _namespace: ClassVar[MetricNamespace]
    _computation_class: ClassVar[type[RecMetricComputation]]
    PREDICTIONS = "predictions"
    LABELS = "labels"
    WEIGHTS = "weights"

    def __init__(
        self,
        world_size: int,
        my_rank: int,
        batch_size: int,
        tasks: list[RecTaskInfo],
        compute_mode: RecComputeMode = RecComputeMode.UNFUSED_TASKS_COMPUTATION,
        window_size: int = 100,
        fused_update_limit: int = 0,
        compute_on_all_ranks: bool = False,
        should_validate_update: bool = False,
        process_group: dist.ProcessGroup | None = None,
        **kwargs: Any,
    ) -> None:
        if compute_mode in _FUSED and fused_update_limit > 0:
            raise ValueError(
                "The fused tasks computation and the fused update cannot be set at the same time"
            )
        super().__init__()
        # my_rank only picks who reports (rank 0); as TorchRec, a rank past world_size is a
        # non-reporting rank (TorchRec's tests build one-rank metrics with my_rank=1)
        if world_size <= 0 or my_rank < 0:
            raise ValueError(f"need world_size ({world_size}) > 0 and my_rank ({my_rank}) >= 0")
        self._world_size = world_size
        self._my_rank = my_rank
        self._window_size = math.ceil(window_size / world_size)
        self._batch_size = batch_size
        self._tasks = list(tasks)
        self._compute_mode = compute_mode
        self._fused_update_limit = fused_update_limit
        self._should_validate_update = should_validate_update
        self._required_inputs: set[str] = set()
        self._update_buffers: dict[str, list[RecModelOutput]] = {
            self.PREDICTIONS: [],
            self.LABELS: [],
            self.WEIGHTS: [],
        }
        self._fused_update_log_tensors: list[bool] = []
        for key in IGNORED_KWARGS:
            kwargs.pop(key, None)
        if self._window_size < batch_size:
            raise ValueError(
                f"Local window size must be larger than batch size. Got local window size "
                f"{self._window_size} and batch size {batch_size}."
            )
        self._metrics_computations = nn.ModuleList()
        fused = compute_mode in _FUSED
        groups: list[list[RecTaskInfo]] = [self._tasks] if fused else [[t] for t in self._tasks]
        for group in groups:
            config: RecTaskInfo | list[RecTaskInfo] = group if fused else group[0]
            self._metrics_computations.append(
                self._computation_class(
                    my_rank=my_rank,
                    batch_size=batch_size,
                    n_tasks=len(group),
                    window_size=self._window_size,
                    compute_on_all_ranks=compute_on_all_ranks,
                    should_validate_update=should_validate_update,
                    compute_mode=compute_mode,
                    process_group=process_group,
                    fused_update_limit=fused_update_limit,
                    **{**kwargs, **self._get_task_kwargs(config)},
                )
            )
            self._required_inputs.update(self._get_task_required_inputs(config))

    def _computations(self) -> list[RecMetricComputation]:
        return [cast(RecMetricComputation, c) for c in self._metrics_computations]

    def _parts(self) -> Sequence[_Part]:
        return self._computations()

    def _get_task_kwargs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> dict[str, Any]:
        return {}

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return set()

    def get_required_inputs(self) -> set[str]:
        return self._required_inputs

    # --- update -------------------------------------------------------------------------------

    def update(
        self,
        *,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        **kwargs: Any,
    ) -> None:
        """Add one batch: `{task name: (B,) tensor}` dicts, or (n_tasks, B) tensors in the
        fused modes. Weights default to ones. With `fused_update_limit` > 1, batches are
        buffered and added together every that many calls (and before compute). Each added
        batch reports its sizes to `EventLoggingHandler.n_batch_log_event` (a `RecMetricList`
        reports once per batch)."""
        log_tensors = bool(kwargs.pop("_log_tensors", True))
        if self._fused_update_limit > 0:
            self._update_buffers[self.PREDICTIONS].append(predictions)
            self._update_buffers[self.LABELS].append(labels)
            if weights is not None:
                self._update_buffers[self.WEIGHTS].append(weights)
            self._fused_update_log_tensors.append(log_tensors)
            self._check_fused_update(force=False)
            return
        self._update(
            predictions=predictions,
            labels=labels,
            weights=weights,
            _log_tensors=log_tensors,
            **kwargs,
        )

    def _check_fused_update(self, force: bool) -> None:
        buffered = self._update_buffers[self.PREDICTIONS]
        if self._fused_update_limit <= 0 or not buffered:
            return
        if not force and len(buffered) < self._fused_update_limit:
            return
        fused = {k: _fuse(v) for k, v in self._update_buffers.items() if v}
        for v in self._update_buffers.values():
            v.clear()
        log_tensors = any(self._fused_update_log_tensors)
        self._fused_update_log_tensors.clear()
        self._update(
            predictions=fused[self.PREDICTIONS],
            labels=fused[self.LABELS],
            weights=fused.get(self.WEIGHTS),
            _log_tensors=log_tensors,
        )

    def _update(
        self,
        *,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        _log_tensors: bool = True,
        **kwargs: Any,
    ) -> None:
        with torch.no_grad():
            if self._compute_mode in _FUSED:
                self._update_fused(_log_tensors, predictions, labels, weights, **kwargs)
            else:
                if _log_tensors:
                    self._log_tensor_sizes(predictions, labels, weights)
                self._update_unfused(predictions, labels, weights, **kwargs)

    @staticmethod
    def _get_tensor_size_metadata(name: str, tensor: RecModelOutput) -> dict[str, str]:
        """`{name}_numel` (and `{name}_shape` for a tensor) as strings, TorchRec's format."""
        if isinstance(tensor, Tensor):
            return {f"{name}_numel": str(tensor.numel()), f"{name}_shape": str(list(tensor.shape))}
        return {f"{name}_numel": str({k: v.numel() for k, v in tensor.items()})}

    @torch.compiler.disable  # type: ignore[untyped-decorator,unused-ignore]
    def _log_tensor_sizes(
        self,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
    ) -> None:
        metadata = self._get_tensor_size_metadata(self.PREDICTIONS, predictions)
        metadata.update(self._get_tensor_size_metadata(self.LABELS, labels))
        if weights is not None:
            metadata.update(self._get_tensor_size_metadata(self.WEIGHTS, weights))
        EventLoggingHandler.n_batch_log_event(
            component=TorchrecComponent.REC_METRICS.value,
            event_name="update",
            event_type=EventType.INFO,
            metadata=metadata,
        )

    def _stack(self, value: RecModelOutput, what: str) -> Tensor:
        if isinstance(value, Tensor):
            return value
        missing = [t.name for t in self._tasks if t.name not in value]
        if missing:
            raise ValueError(f"{what} has no tensor for tasks {missing}; keys are {sorted(value)}")
        return torch.stack([value[t.name] for t in self._tasks])

    def _update_fused(
        self,
        log_tensors: bool,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        **kwargs: Any,
    ) -> None:
        n = len(self._tasks)
        lab = self._stack(labels, "labels").reshape(n, -1)
        pred = self._stack(predictions, "predictions")
        pred = (
            pred.reshape(n, -1) if pred.dim() == lab.dim() else pred.reshape(n, -1, pred.shape[-1])
        )
        w = (
            torch.ones_like(lab, dtype=pred.dtype)
            if weights is None
            else self._stack(weights, "weights").reshape(n, -1)
        )
        _check_shapes("all tasks", pred, lab, w)
        if log_tensors:  # the stacked (n_tasks, B) tensors, as TorchRec
            self._log_tensor_sizes(pred, lab, w if weights is not None else None)
        required = kwargs.get("required_inputs")
        if required is not None:
            targets = [
                required[t.tensor_name]
                for t in self._tasks
                if t.tensor_name is not None and t.tensor_name in required
            ]
            if targets:  # TorchRec's name for the tasks' tensors stacked (n_tasks, B)
                required = {**required, "target_tensor": torch.stack(targets).reshape(n, -1)}
                kwargs = {**kwargs, "required_inputs": required}
        computation = self._computations()[0]
        if self._should_validate_update:
            valid = torch.count_nonzero(w, dim=-1) > 0
            if not bool(valid.any()):
                return
            computation.valid_updates().logical_or_(valid)
        computation.update(predictions=pred, labels=lab, weights=w, **kwargs)

    def _update_unfused(
        self,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        **kwargs: Any,
    ) -> None:
        if isinstance(predictions, Tensor) or isinstance(labels, Tensor):
            raise TypeError(
                "UNFUSED_TASKS_COMPUTATION takes {task name: tensor} dicts; pass "
                "compute_mode=RecComputeMode.FUSED_TASKS_COMPUTATION for (n_tasks, B) tensors"
            )
        required = kwargs.pop("required_inputs", None)
        for task, computation in zip(self._tasks, self._computations(), strict=True):
            if task.name not in predictions:
                continue
            if predictions[task.name].numel() == 0:
                continue
            lab = labels[task.name].reshape(1, -1)
            p = predictions[task.name]
            pred = (
                p.reshape(1, -1)
                if p.dim() == labels[task.name].dim()
                else p.reshape(1, -1, p.shape[-1])
            )
            w = (
                torch.ones_like(lab, dtype=pred.dtype)
                if weights is None
                else cast(dict[str, Tensor], weights)[task.name].reshape(1, -1)
            )
            _check_shapes(f"task {task.name!r}", pred, lab, w)
            if self._should_validate_update:
                valid = torch.count_nonzero(w, dim=-1) > 0
                if not bool(valid[0]):
                    continue
                computation.valid_updates().logical_or_(valid)
            extra = dict(kwargs)
            if required is not None:
                extra["required_inputs"] = {
                    k: _per_sample(k, v, lab.shape) for k, v in required.items()
                }
            computation.update(predictions=pred, labels=lab, weights=w, **extra)

    # --- compute ------------------------------------------------------------------------------

    def _tasks_iter(self, scope: str) -> Iterator[_Report]:
        fused = self._compute_mode in _FUSED
        groups = [self._tasks] if fused else [[t] for t in self._tasks]
        for group, computation in zip(groups, self._computations(), strict=True):
            computation.pre_compute()
            reports = getattr(computation, scope + "compute")()
            for report in reports:
                # each report masks its own tasks: one flag per task, read afresh per report
                valid: Iterator[Any] = (
                    iter(computation.valid_updates())
                    if self._should_validate_update
                    else itertools.repeat(1)
                )
                # as TorchRec: one computation per task reports its (1,) value as is; a fused
                # computation's (n_tasks, ...) value is split into one value per task
                values = list(report.value) if fused else [report.value]
                for task, value, ok in zip(group, values, valid, strict=False):
                    shown = value if ok > 0 else torch.zeros_like(value)
                    yield (
                        task,
                        report.name,
                        shown,
                        scope + report.metric_prefix.value,
                        report.description,
                    )

    def compute(self) -> dict[str, Tensor]:
        """Values over every rank, keyed `"<namespace>-<task>|<prefix><metric>"`; a collective.
        Empty off rank 0 unless `compute_on_all_ranks`."""
        self._check_fused_update(force=True)
        return self._keyed(self._tasks_iter(""))

    def local_compute(self) -> dict[str, Tensor]:
        """This rank's values, keyed `"...|local_<prefix><metric>"`; no communication."""
        self._check_fused_update(force=True)
        return self._keyed(self._tasks_iter("local_"))

    def _keyed(self, reports: Iterator[_Report]) -> dict[str, Tensor]:
        return {
            compose_metric_key(self._namespace, task.name, name, prefix, description): value
            for task, name, value, prefix, description in reports
        }

    def reset(self) -> None:
        for v in self._update_buffers.values():
            v.clear()
        self._fused_update_log_tensors.clear()
        super().reset()

    def get_memory_usage(self) -> dict[Tensor, int]:
        """Bytes of every state tensor and window buffer."""
        out: dict[Tensor, int] = {}
        for computation in self._computations():
            for t in computation.buffers():
                out[t] = t.numel() * t.element_size()
            for window in computation._windows.values():
                for t in window.buffers:
                    out[t] = t.numel() * t.element_size()
        return out


def _per_sample(name: str, value: Tensor, shape: torch.Size) -> Tensor:
    """A required input as one value per sample of a (1, B) task batch (a scalar repeats)."""
    if value.numel() == 1:
        return value.expand(shape)
    if value.numel() != shape.numel():
        raise ValueError(
            f"required input {name!r} has {value.numel()} values for a batch of "
            f"{shape.numel()}; pass one value per sample"
        )
    return value.reshape(shape)


def _check_shapes(where: str, pred: Tensor, lab: Tensor, w: Tensor) -> None:
    if pred.shape[: lab.dim()] != lab.shape or w.shape != lab.shape:
        raise ValueError(
            f"{where}: predictions {tuple(pred.shape)}, labels {tuple(lab.shape)} and weights "
            f"{tuple(w.shape)} must hold the same samples"
        )


def _fuse(outputs: list[RecModelOutput]) -> RecModelOutput:
    if isinstance(outputs[0], Tensor):
        return torch.cat([o for o in outputs if isinstance(o, Tensor)], dim=-1)
    by_task: dict[str, list[Tensor]] = collections.defaultdict(list)
    for o in outputs:
        assert isinstance(o, dict)
        for name, t in o.items():
            by_task[name].append(t)
    return {name: torch.cat(ts) for name, ts in by_task.items()}


class RecMetricList(_Parts, nn.Module):
    """Several RecMetrics updated and computed together (in list order on every rank)."""

    def __init__(self, rec_metrics: list[RecMetric]) -> None:
        super().__init__()
        self.rec_metrics = nn.ModuleList(rec_metrics)
        required: set[str] = set()
        for m in rec_metrics:
            required |= m.get_required_inputs()
        self.required_inputs: list[str] | None = sorted(required) or None

    def _metrics(self) -> list[RecMetric]:
        return [cast(RecMetric, m) for m in self.rec_metrics]

    def _parts(self) -> Sequence[_Part]:
        return self._metrics()

    def __len__(self) -> int:
        return len(self.rec_metrics)

    def __getitem__(self, idx: int) -> nn.Module:
        return self.rec_metrics[idx]

    def get_required_inputs(self) -> list[str] | None:
        return self.required_inputs

    def update(
        self,
        *,
        predictions: RecModelOutput,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("_log_tensors", None)
        for i, m in enumerate(self._metrics()):  # the batch's sizes are reported once
            m.update(
                predictions=predictions,
                labels=labels,
                weights=weights,
                _log_tensors=i == 0,
                **kwargs,
            )

    def compute(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for m in self._metrics():
            out.update(m.compute())
        return out

    def local_compute(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for m in self._metrics():
            out.update(m.local_compute())
        return out
