"""The shared shape of ratio-of-sums metrics (NE, calibration, CTR, MSE, MAE, accuracy, ...).

Each batch contributes per-task float64 sums (`_batch_states`); lifetime and window values
are formulas of those sums, so they are exact across ranks: summing the sums over ranks
gives the sums of the pooled samples.

A metric of this family is a declaration, not code: its state names, the function that sums
one batch (TorchRec's `get_<metric>_states`) and a table of the values it reports, each a
function of named states (TorchRec's `compute_<metric>`):

    class MSEMetricComputation(SumStatesComputation):
        _state_names = (ERROR_SUM, WEIGHTED_NUM_SAMPES, "label_sum", "label_squared_sum")
        _batch_sums = staticmethod(get_mse_states)
        _formulas = (Formula(MetricName.MSE, compute_mse, (ERROR_SUM, WEIGHTED_NUM_SAMPES)), ...)

A metric that reports one value of its sums says all three with one row (`_row`, a `SumsRow`:
`Ratio` in _ratios.py, `SingleSum` in _single_sums.py), and its RecMetric, a `SumStatesMetric`,
takes the namespace of that value's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from shardrec_metrics.rec.computation import BatchComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

StateGetter = Callable[[str], Tensor]
BatchSums = Callable[..., dict[str, Tensor]]


@dataclass(frozen=True)
class Formula:
    """One reported value: `fn` of the lifetime (or window) states named in `states`, in order,
    and of the keyword `options` it takes from the computation (`eta`, ...)."""

    name: MetricName
    fn: Callable[..., Tensor]
    states: tuple[str, ...]
    options: tuple[str, ...] = ()


class SumsRow(Protocol):
    """A one-value metric as data: `formula` (its name, function and the states it reads, which
    are the metric's states) and `states`, TorchRec's `get_<metric>_states`."""

    @property
    def formula(self) -> Formula: ...

    @property
    def states(self) -> BatchSums: ...


class SumStatesComputation(BatchComputation):
    """A computation whose states are (n_tasks,) (or `_state_shape()`) float64 sums, each
    with a window.

    Subclasses declare `_state_names`, `_batch_sums` (called as `(labels, predictions,
    weights, *self._batch_sums_args())`) and `_formulas` (reported as every lifetime value in
    table order, then every window value); `_optional_formulas` are reported after them (in
    the same way) when their constructor flag is true (`include_logloss=True`, ...). A subclass
    that sets `_row` instead gets all three from it.
    """

    _state_names: ClassVar[tuple[str, ...]]
    _batch_sums: ClassVar[BatchSums]
    _formulas: ClassVar[tuple[Formula, ...]]
    _optional_formulas: ClassVar[tuple[tuple[str, Formula], ...]] = ()  # (flag, formula)
    _row: ClassVar[SumsRow]
    _checkpointed: ClassVar[bool] = True  # False: no state in the state dict (TorchRec's scalar)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        row = cls.__dict__.get("_row")
        if row is not None:
            cls._state_names = row.formula.states
            cls._batch_sums = row.states
            cls._formulas = (row.formula,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        wanted = tuple(f for flag, f in self._optional_formulas if kwargs.pop(flag, False))
        super().__init__(*args, **kwargs)
        self._extra_formulas = wanted
        # a state that only an option left off reads (R squared's label sums) is kept out of
        # the state dict, as TorchRec's
        read = {s for f in (*self._formulas, *wanted) for s in f.states}
        for name in self._state_names:
            self._add_state(
                name,
                torch.zeros(self._state_shape(), dtype=torch.double),
                add_window_state=True,
                dist_reduce_fx="sum",
                persistent=self._checkpointed and name in read,
            )

    def _state_shape(self) -> tuple[int, ...]:
        """Each state's shape: one sum per task, or (n_tasks, k) sums (k thresholds, ...)."""
        return (self._n_tasks,)

    def _batch_sums_args(self) -> tuple[Any, ...]:
        """What `_batch_sums` takes after (labels, predictions, weights)."""
        return ()

    def _formula_options(self) -> dict[str, Any]:
        """The keyword options a formula may name (`Formula.options`)."""
        return {}

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        """Per-task sums of one batch: (n_tasks,) each, from (n_tasks, B) inputs."""
        return self._batch_sums(labels, predictions, weights, *self._batch_sums_args())

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        self._add_states(self._batch_states(labels, predictions, weights), labels.shape[-1])

    def _lifetime(self, name: str) -> Tensor:
        state = getattr(self, name)
        assert isinstance(state, Tensor)
        return state

    def _value(self, formula: Formula, get: StateGetter) -> Tensor:
        options = self._formula_options()
        return formula.fn(
            *(get(s) for s in formula.states), **{k: options[k] for k in formula.options}
        )

    def _reports(self, *formulas: Formula) -> list[MetricComputationReport]:
        """The lifetime reports of `formulas` in order, then their window reports."""
        return [
            MetricComputationReport(name=f.name, metric_prefix=prefix, value=self._value(f, get))
            for prefix, get in (
                (MetricPrefix.LIFETIME, self._lifetime),
                (MetricPrefix.WINDOW, self.get_window_state),
            )
            for f in formulas
        ]

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(*self._formulas) + self._reports(*self._extra_formulas)


def ratio_or_zero(num: Tensor, denom: Tensor) -> Tensor:
    """num / denom, 0 where denom == 0 (TorchRec's convention for rates of nothing)."""
    return torch.where(
        denom == 0.0, torch.zeros_like(num, dtype=torch.double), num / denom
    ).double()


def weights_or_ones(weights: Tensor | None, like: Tensor) -> Tensor:
    """`weights`, or ones shaped as `like` for the public state functions' `weights=None`."""
    return torch.ones_like(like) if weights is None else weights


class SumStatesMetric(RecMetric):
    """The RecMetric of a one-value sum-states computation: its namespace is that value's name
    (TorchRec's `ctr-<task>|lifetime_ctr`) unless the class sets `_namespace` itself."""

    _computation_class: ClassVar[type[SumStatesComputation]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_namespace" not in cls.__dict__:
            cls._namespace = MetricNamespace(cls._computation_class._formulas[0].name.value)


NUM_EXAMPLES = "num_examples"


class ServingComputation(SumStatesComputation):
    """A sum-states metric that also counts its examples of nonzero weight (`num_examples`,
    lifetime only, reported last as `total_examples`): TorchRec's serving metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._add_state(
            NUM_EXAMPLES,
            torch.zeros(self._n_tasks, dtype=torch.long),
            add_window_state=False,
            persistent=True,
        )

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        super()._add_batch(predictions, labels, weights, **kwargs)
        self._add_states({NUM_EXAMPLES: torch.count_nonzero(weights, dim=-1)}, 0, window=False)

    def _compute(self) -> list[MetricComputationReport]:
        total = MetricComputationReport(
            name=MetricName.TOTAL_EXAMPLES,
            metric_prefix=MetricPrefix.DEFAULT,
            value=self._lifetime(NUM_EXAMPLES).detach(),
        )
        return [*super()._compute(), total]
