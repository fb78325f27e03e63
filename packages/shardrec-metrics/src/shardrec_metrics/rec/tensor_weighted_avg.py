"""Tensor weighted average: the weighted mean of a model output named by each task's
`tensor_name` (instead of the predictions), weighted by the task's weights when
`task.weighted`, else plainly averaged. Keys use the `weighted_avg` namespace, as TorchRec."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_config import RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric, RecMetricException
from shardrec_metrics.rec.weighted_avg import get_mean

__all__ = ["TensorWeightedAvgMetric", "TensorWeightedAvgMetricComputation", "get_mean"]


class TensorWeightedAvgMetricComputation(SumStatesComputation):
    """Weighted mean of `required_inputs[task.tensor_name]` per task."""

    _state_names = ("weighted_sum", "weighted_num_samples")
    _formulas = (Formula(MetricName.WEIGHTED_AVG, get_mean, _state_names),)

    def __init__(
        self, *args: Any, tasks: list[RecTaskInfo], description: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        missing = [t.name for t in tasks if t.tensor_name is None]
        if missing:
            raise RecMetricException(
                f"TensorWeightedAvgMetricComputation expects all tasks to have tensor_name, "
                f"but tasks {missing} have None"
            )
        self.tasks = list(tasks)
        self._description = description
        self._weighted = torch.tensor([t.weighted for t in self.tasks]).unsqueeze(-1)
        self._target: Tensor | None = None

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        required = kwargs.get("required_inputs")
        if required is None:
            raise RecMetricException("TensorWeightedAvgMetricComputation expects 'required_inputs'")
        key = "target_tensor" if len(self.tasks) > 1 else str(self.tasks[0].tensor_name)
        if key not in required:
            raise RecMetricException(
                f"TensorWeightedAvgMetricComputation expects required_inputs to contain {key!r}; "
                f"got {sorted(required)}"
            )
        self._target = required[key].reshape(labels.shape)
        super()._add_batch(predictions, labels, weights, **kwargs)

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        assert self._target is not None
        target, mask = self._target, self._weighted.to(weights.device)
        values = torch.where(mask, target * weights, target)
        counts = torch.where(mask, weights, torch.ones_like(weights))
        return {"weighted_sum": values.sum(dim=-1), "weighted_num_samples": counts.sum(dim=-1)}

    def _compute(self) -> list[MetricComputationReport]:
        return [
            MetricComputationReport(r.name, r.metric_prefix, r.value, self._description)
            for r in super()._compute()
        ]


class TensorWeightedAvgMetric(RecMetric):
    _namespace = MetricNamespace.WEIGHTED_AVG
    _computation_class = TensorWeightedAvgMetricComputation

    def _get_task_kwargs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> dict[str, Any]:
        return {"tasks": [task_config] if isinstance(task_config, RecTaskInfo) else task_config}

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        tasks = [task_config] if isinstance(task_config, RecTaskInfo) else task_config
        weighted: dict[str, bool] = {}
        for task in tasks:
            if task.tensor_name is None:
                continue
            if weighted.get(task.tensor_name, task.weighted) is not task.weighted:
                raise RecMetricException(
                    f"tensor {task.tensor_name!r} is registered as "
                    f"weighted={weighted[task.tensor_name]} and cannot be registered again with "
                    f"weighted={task.weighted}"
                )
            weighted[task.tensor_name] = task.weighted
        return set(weighted)
