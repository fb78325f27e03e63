"""NE over serving data: NE (ne.py) plus `total_examples`, the count of nonzero-weight samples."""

from __future__ import annotations

from shardrec_metrics.rec._sum_computation import NUM_EXAMPLES, Formula, ServingComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import NE_STATES, EntropyComputation, compute_ne, get_ne_states
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = ["NUM_EXAMPLES", "ServingNEMetric", "ServingNEMetricComputation"]


class ServingNEMetricComputation(ServingComputation, EntropyComputation):
    """NE's states and value (eta only: TorchRec's serving NE ignores missing labels), plus
    the serving count of nonzero-weight examples."""

    _state_names = NE_STATES
    _batch_sums = staticmethod(get_ne_states)
    _formulas = (Formula(MetricName.NE, compute_ne, NE_STATES, ("eta",)),)


class ServingNEMetric(RecMetric):
    _namespace = MetricNamespace.SERVING_NE
    _computation_class = ServingNEMetricComputation
