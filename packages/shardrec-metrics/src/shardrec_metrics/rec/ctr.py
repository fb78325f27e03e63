"""CTR: weighted share of positive labels (0 when the total weight is 0)."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "CTR_DENOM",
    "CTR_NUM",
    "CTRMetric",
    "CTRMetricComputation",
    "compute_ctr",
    "get_ctr_states",
]

CTR_NUM = "ctr_num"
CTR_DENOM = "ctr_denom"


def compute_ctr(ctr_num: Tensor, ctr_denom: Tensor) -> Tensor:
    return ratio_or_zero(ctr_num, ctr_denom)


def get_ctr_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {CTR_NUM: (labels * weights).sum(dim=-1), CTR_DENOM: weights.sum(dim=-1)}


class CTRMetricComputation(SumStatesComputation):
    _state_names = (CTR_NUM, CTR_DENOM)
    _batch_sums = staticmethod(get_ctr_states)
    _formulas = (Formula(MetricName.CTR, compute_ctr, _state_names),)


class CTRMetric(RecMetric):
    _namespace = MetricNamespace.CTR
    _computation_class = CTRMetricComputation
