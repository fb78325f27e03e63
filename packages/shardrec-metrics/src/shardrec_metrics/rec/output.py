"""Output: logs model outputs passed as required inputs (TorchRec's OutputMetric).

Each batch sets `latest_imp` and `total_latest_imp` to the batch means of the model outputs of
those names (`RecMetricModule` passes them: the metric declares them required). Values are
the latest batch's, summed over ranks, reported without prefix under the descriptions
`_latest_imp` and `_total_latest_imp`: `output-<task>|output_latest_imp`. No window.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec.computation import BatchComputation, RecMetricException
from shardrec_metrics.rec.metrics_config import RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = ["OUTPUT_INPUTS", "OutputMetric", "OutputMetricComputation"]

OUTPUT_INPUTS = ("latest_imp", "total_latest_imp")


class OutputMetricComputation(BatchComputation):
    _needs_weights = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in OUTPUT_INPUTS:
            self._add_state(
                name, torch.zeros(self._n_tasks, dtype=torch.double), add_window_state=False
            )

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        given = kwargs.get("required_inputs") or {}
        missing = [n for n in OUTPUT_INPUTS if n not in given]
        if missing:
            raise RecMetricException(
                f"OutputMetricComputation needs required_inputs {list(OUTPUT_INPUTS)}; missing "
                f"{missing} (pass the model outputs of those names, e.g. through RecMetricModule)"
            )
        means = {n: self._batch_mean(n, given[n]) for n in OUTPUT_INPUTS}
        if all(m.numel() > 0 for m in means.values()):
            self._add_states(means, labels.shape[-1], window=False, latest=True)

    def _batch_mean(self, name: str, value: Tensor) -> Tensor:
        """(1,) or (n_tasks,) means over the batch; empty for an empty batch."""
        rows = value.double().reshape(1, -1) if value.dim() <= 1 else value.double()
        rows = rows.reshape(rows.shape[0], -1)
        if rows.shape[0] not in (1, self._n_tasks):
            raise ValueError(
                f"required input {name!r} has shape {tuple(value.shape)}; pass (B,) or "
                f"({self._n_tasks}, B) for this metric's {self._n_tasks} task(s)"
            )
        return rows.mean(dim=-1) if rows.shape[-1] > 0 else rows.new_zeros(0)

    def _compute(self) -> list[MetricComputationReport]:
        return [
            MetricComputationReport(
                name=MetricName.OUTPUT,
                metric_prefix=MetricPrefix.DEFAULT,
                value=getattr(self, name),
                description=f"_{name}",
            )
            for name in OUTPUT_INPUTS
        ]


class OutputMetric(RecMetric):
    _namespace = MetricNamespace.OUTPUT
    _computation_class = OutputMetricComputation

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return set(OUTPUT_INPUTS)
