"""The shared shape of ratio-of-sums metrics (NE, calibration, CTR, MSE, MAE, accuracy, ...).

Each batch contributes per-task float64 sums (`_batch_states`); lifetime and window values
are formulas of those sums, so they are exact across ranks: summing the sums over ranks
gives the sums of the pooled samples.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec.metrics_namespace import MetricName, MetricPrefix
from shardrec_metrics.rec.rec_metric import (
    MetricComputationReport,
    RecMetricComputation,
    RecMetricException,
)

StateGetter = Callable[[str], Tensor]


class SumStatesComputation(RecMetricComputation):
    """A computation whose states are (n_tasks,) float64 sums, each with a window."""

    _state_names: ClassVar[tuple[str, ...]]
    _needs_weights: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self._state_names:
            self._add_state(
                name,
                torch.zeros(self._n_tasks, dtype=torch.double),
                add_window_state=True,
                dist_reduce_fx="sum",
                persistent=True,
            )

    @abc.abstractmethod
    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        """Per-task sums of one batch: (n_tasks,) each, from (n_tasks, B) inputs."""

    def update(
        self,
        *,
        predictions: Tensor | None,
        labels: Tensor,
        weights: Tensor | None,
        **kwargs: Any,
    ) -> None:
        if predictions is None or (weights is None and self._needs_weights):
            raise RecMetricException(
                f"Inputs 'predictions' and 'weights' should not be None for "
                f"{type(self).__name__} update"
            )
        if weights is None:
            weights = torch.ones_like(predictions)
        self._add_states(self._batch_states(labels, predictions, weights), labels.shape[-1])

    def _lifetime(self, name: str) -> Tensor:
        state = getattr(self, name)
        assert isinstance(state, Tensor)
        return state

    def _reports(
        self, name: MetricName, formula: Callable[[StateGetter], Tensor]
    ) -> list[MetricComputationReport]:
        """The lifetime and window reports of `formula(state getter)`."""
        return [
            MetricComputationReport(
                name=name, metric_prefix=MetricPrefix.LIFETIME, value=formula(self._lifetime)
            ),
            MetricComputationReport(
                name=name, metric_prefix=MetricPrefix.WINDOW, value=formula(self.get_window_state)
            ),
        ]


def ratio_or_zero(num: Tensor, denom: Tensor) -> Tensor:
    """num / denom, 0 where denom == 0 (TorchRec's convention for rates of nothing)."""
    return torch.where(
        denom == 0.0, torch.zeros_like(num, dtype=torch.double), num / denom
    ).double()


class SingleSumComputation(SumStatesComputation):
    """A metric that reports one weighted sum as is (sum of weights, of positives, ...)."""

    _needs_weights = False
    _metric_name: ClassVar[MetricName]

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(self._metric_name, lambda get: get(self._state_names[0]))


NUM_EXAMPLES = "num_examples"


class ServingComputation(SumStatesComputation):
    """A sum-states metric that also counts its examples of nonzero weight (`num_examples`,
    lifetime only, reported as `total_examples`): TorchRec's serving metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._add_state(
            NUM_EXAMPLES,
            torch.zeros(self._n_tasks, dtype=torch.long),
            add_window_state=False,
            persistent=True,
        )

    def update(
        self,
        *,
        predictions: Tensor | None,
        labels: Tensor,
        weights: Tensor | None,
        **kwargs: Any,
    ) -> None:
        super().update(predictions=predictions, labels=labels, weights=weights, **kwargs)
        if weights is not None:
            self._add_states({NUM_EXAMPLES: torch.count_nonzero(weights, dim=-1)}, 0, window=False)

    def _total_examples(self) -> MetricComputationReport:
        return MetricComputationReport(
            name=MetricName.TOTAL_EXAMPLES,
            metric_prefix=MetricPrefix.DEFAULT,
            value=self._lifetime(NUM_EXAMPLES).detach(),
        )
