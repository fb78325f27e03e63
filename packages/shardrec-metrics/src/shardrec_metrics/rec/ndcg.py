"""NDCG: TorchRec's session-wise lambda-NDCG loss, averaged over sessions.

Samples of a batch with equal consecutive `session_id` (a required input, named by
`session_key`) form a session. For a session with gains g (labels, or 2^label - 1 with
`exponential_gain=True`):

    loss = (1 - DCG / max(IDCG, 1e-6)) * max weight in the session
    DCG  = sum_i g_i / log2(2 + rank of prediction i),  IDCG: the same ranked by label

    ndcg = sum of session losses / number of sessions

Ranks are descending with ties in sample order (TorchRec's argsort orders ties arbitrarily).
Sessions never span batches, so the sums are exact across ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.computation import required_input
from shardrec_metrics.rec.metrics_config import RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NDCGComputation",
    "NDCGMetric",
    "compute_lambda_ndcg",
    "compute_lambda_ndcg_by_session",
    "compute_ndcg",
    "get_ndcg_states",
    "get_position_discounts",
    "session_ids_to_lengths",
]

SUM_NDCG = "sum_ndcg"
NUM_SESSIONS = "num_sessions"
SESSION_KEY = "session_id"


def session_ids_to_lengths(session_ids: Tensor, device: torch.device | None = None) -> Tensor:
    """Lengths of the runs of equal consecutive ids, e.g. [1, 2, 2] -> [1, 2]."""
    ids = session_ids.reshape(-1)
    if ids.numel() == 0:
        return torch.zeros(0, dtype=torch.int, device=device)
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[1:] = ids[1:] != ids[:-1]
    bounds = torch.cat([starts.nonzero().reshape(-1), torch.tensor([ids.numel()])])
    return torch.diff(bounds).to(dtype=torch.int, device=device)


def get_position_discounts(t: Tensor) -> Tensor:
    """1 / log2(2 + rank), rank 0 for the largest value (ties in sample order)."""
    order = torch.argsort(t, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(order.numel(), device=t.device)
    return torch.reciprocal(torch.log2(ranks.double() + 2.0))


def compute_lambda_ndcg_by_session(prediction: Tensor, label: Tensor, use_exp_gain: bool) -> Tensor:
    """1 - DCG / max(IDCG, 1e-6) of one session."""
    gain = torch.exp2(label.double()) - 1.0 if use_exp_gain else label.double()
    idcg = torch.clamp(gain @ get_position_discounts(label), min=1e-6)
    return 1.0 - (gain @ get_position_discounts(prediction)) / idcg


def compute_lambda_ndcg(
    prediction: Tensor,
    label: Tensor,
    weight: Tensor,
    session_lengths: Tensor,
    use_exp_gain: bool,
) -> Tensor:
    """The sum over sessions of the session loss times the session's largest weight."""
    sizes = [int(n) for n in session_lengths.tolist()]
    total = torch.zeros((), dtype=torch.double)
    for p, y, w in zip(*(torch.split(t, sizes) for t in (prediction, label, weight)), strict=True):
        total += compute_lambda_ndcg_by_session(p, y, use_exp_gain) * w.double().max()
    return total


def get_ndcg_states(
    labels: Tensor,
    predictions: Tensor,
    weights: Tensor,
    session_ids: Tensor,
    exponential_gain: bool,
) -> dict[str, Tensor]:
    """Per task: the summed session losses and the session count, from (n_tasks, B) inputs
    and (n_tasks, B) or (B,) session ids."""
    ids = session_ids.reshape(1, -1) if session_ids.dim() <= 1 else session_ids
    if ids.dim() != 2 or ids.shape[-1] != labels.shape[-1] or ids.shape[0] not in (1, len(labels)):
        raise ValueError(
            f"session ids of shape {tuple(session_ids.shape)} do not match the batch "
            f"{tuple(labels.shape)}; pass one id per sample"
        )
    ids = ids.expand_as(labels)
    sums, counts = [], []
    for i in range(labels.shape[0]):
        lengths = session_ids_to_lengths(ids[i])
        sums.append(
            compute_lambda_ndcg(predictions[i], labels[i], weights[i], lengths, exponential_gain)
        )
        counts.append(float(lengths.numel()))
    return {SUM_NDCG: torch.stack(sums), NUM_SESSIONS: torch.tensor(counts, dtype=torch.double)}


def compute_ndcg(sum_ndcg: Tensor, num_sessions: Tensor) -> Tensor:
    """Mean session loss (NaN without sessions, as TorchRec)."""
    return sum_ndcg / num_sessions


class NDCGComputation(SumStatesComputation):
    """NDCG per task; takes `exponential_gain` and `session_key` (module docstring)."""

    _state_names = (SUM_NDCG, NUM_SESSIONS)
    _batch_sums = staticmethod(get_ndcg_states)
    _formulas = (Formula(MetricName.NDCG, compute_ndcg, _state_names),)

    def __init__(
        self,
        *args: Any,
        exponential_gain: bool = False,
        session_key: str = SESSION_KEY,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._exponential_gain = exponential_gain
        self._session_key = session_key

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        session_ids = required_input(kwargs, self._session_key, "NDCG (session ids)")
        states = self._batch_sums(labels, predictions, weights, session_ids, self._exponential_gain)
        self._add_states(states, labels.shape[-1])


class NDCGMetric(RecMetric):
    """TorchRec's NDCGMetric: `ndcg-<task>|lifetime_ndcg`, `...|window_ndcg`."""

    _namespace = MetricNamespace.NDCG
    _computation_class = NDCGComputation

    def __init__(self, *args: Any, session_key: str = SESSION_KEY, **kwargs: Any) -> None:
        self._session_key = session_key
        super().__init__(*args, session_key=session_key, **kwargs)

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return {self._session_key}
