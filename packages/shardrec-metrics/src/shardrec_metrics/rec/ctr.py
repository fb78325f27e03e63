"""TorchRec's `ctr`: defined with the other ratios of two sums in _ratios.py."""

from shardrec_metrics.rec._ratios import (
    CTR_DENOM,
    CTR_NUM,
    CTRMetric,
    CTRMetricComputation,
    compute_ctr,
    get_ctr_states,
)

__all__ = [
    "CTR_DENOM",
    "CTR_NUM",
    "CTRMetric",
    "CTRMetricComputation",
    "compute_ctr",
    "get_ctr_states",
]
