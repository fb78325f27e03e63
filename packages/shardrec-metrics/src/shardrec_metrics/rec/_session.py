"""TorchRec's session-level precision and recall (modules precision_session, recall_session).

Each task names, in its `RecTaskInfo.session_metric_def`, the required input holding every
sample's session id (`session_var_name`) and `top_threshold` k. Within a session, a sample is
predicted positive when fewer than k samples of the session have a larger prediction (ties
share the better rank, so a session may have more than k). With `run_ranking_of_labels`, the
labels are replaced the same way by "among the top k labels of the session". The metrics are
ratios of weighted counts of those, so exact across ranks:

    precision = TP / (TP + FP),   recall = TP / (TP + FN)   (NaN over 0, as TorchRec)

One computation per task: the fused modes and fused updates raise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.computation import RecMetricException, required_input
from shardrec_metrics.rec.metrics_config import RecTaskInfo, SessionMetricDef
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "PrecisionSessionMetric",
    "PrecisionSessionMetricComputation",
    "RecallSessionMetric",
    "RecallSessionMetricComputation",
    "ranking_within_session",
    "session_counts",
]


def ranking_within_session(predictions: Tensor, session: Tensor) -> Tensor:
    """Per sample, how many samples of its session (same id, same row) have a larger value."""
    same_session = session[..., :, None] == session[..., None, :]
    larger = predictions[..., None, :] > predictions[..., :, None]
    return (same_session & larger).sum(dim=-1)


def _ratio_or_nan(num: Tensor, denom: Tensor) -> Tensor:
    """num / denom, NaN where denom == 0 (TorchRec's session metrics)."""
    return torch.where(denom == 0, torch.full_like(num, torch.nan), num / denom).double()


def _calc_precision(num_true_pos: Tensor, num_false_pos: Tensor) -> Tensor:
    return _ratio_or_nan(num_true_pos, num_true_pos + num_false_pos)


def _calc_recall(num_true_pos: Tensor, num_false_neg: Tensor) -> Tensor:
    return _ratio_or_nan(num_true_pos, num_true_pos + num_false_neg)


NUM_TRUE_POS = "num_true_pos"
NUM_FALSE_POS = "num_false_pos"
NUM_FALSE_NEGATIVE = "num_false_neg"


def session_counts(labels: Tensor, predicted: Tensor, weights: Tensor) -> dict[str, Tensor]:
    """Weighted TP, FP and FN per task of 0/1 `predicted` (the top-k indicator)."""
    hits = weights * labels
    return {
        NUM_TRUE_POS: (hits * predicted).sum(dim=-1),
        NUM_FALSE_POS: ((weights - hits) * predicted).sum(dim=-1),
        NUM_FALSE_NEGATIVE: (hits * (1.0 - predicted)).sum(dim=-1),
    }


class SessionComputation(SumStatesComputation):
    """Keeps the counts its formula names, of the top-k predictions (module docstring)."""

    _batch_sums = staticmethod(session_counts)

    def __init__(self, *args: Any, session_metric_def: SessionMetricDef, **kwargs: Any) -> None:
        self.session_var_name = session_metric_def.session_var_name
        self.top_threshold = session_metric_def.top_threshold
        self.run_ranking_of_labels = session_metric_def.run_ranking_of_labels
        super().__init__(*args, **kwargs)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        session = required_input(kwargs, self.session_var_name, "a session metric (session ids)")
        if session.shape != labels.shape:
            raise ValueError(
                f"session ids of shape {tuple(session.shape)} do not match the batch "
                f"{tuple(labels.shape)}; pass one id per sample"
            )
        k = self.top_threshold
        assert k is not None  # SessionMetric checked it
        predicted = (ranking_within_session(predictions.double(), session) < k).double()
        if self.run_ranking_of_labels:
            labels = (ranking_within_session(labels.double(), session) < k).double()
        counts = self._batch_sums(labels.double(), predicted, weights.double())
        self._add_states({n: counts[n] for n in self._state_names}, labels.shape[-1])


class SessionMetric(RecMetric):
    """A RecMetric of one SessionComputation per task, each with its SessionMetricDef."""

    def _get_task_kwargs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> dict[str, Any]:
        name = type(self).__name__
        if not isinstance(task_config, RecTaskInfo):
            raise RecMetricException(f"Fused computation is not supported for {name}")
        if self._fused_update_limit > 0:
            raise RecMetricException(f"Fused update is not supported for {name}")
        definition = task_config.session_metric_def
        if definition is None or definition.top_threshold is None:
            raise RecMetricException(
                f"task {task_config.name!r} needs session_metric_def=SessionMetricDef("
                f"session_var_name=..., top_threshold=k) for {name}"
            )
        return {"session_metric_def": definition}

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        assert isinstance(task_config, RecTaskInfo) and task_config.session_metric_def
        return {task_config.session_metric_def.session_var_name}


_PRECISION = Formula(
    MetricName.PRECISION_SESSION_LEVEL, _calc_precision, (NUM_TRUE_POS, NUM_FALSE_POS)
)
_RECALL = Formula(MetricName.RECALL_SESSION_LEVEL, _calc_recall, (NUM_TRUE_POS, NUM_FALSE_NEGATIVE))


class PrecisionSessionMetricComputation(SessionComputation):
    _formulas = (_PRECISION,)
    _state_names = _PRECISION.states


class RecallSessionMetricComputation(SessionComputation):
    _formulas = (_RECALL,)
    _state_names = _RECALL.states


class PrecisionSessionMetric(SessionMetric):
    """`precision_session_level-<task>|lifetime_precision_session_level`, `window_...`."""

    _namespace = MetricNamespace.PRECISION_SESSION_LEVEL
    _computation_class = PrecisionSessionMetricComputation


class RecallSessionMetric(SessionMetric):
    """`recall_session_level-<task>|lifetime_recall_session_level`, `window_...`."""

    _namespace = MetricNamespace.RECALL_SESSION_LEVEL
    _computation_class = RecallSessionMetricComputation
