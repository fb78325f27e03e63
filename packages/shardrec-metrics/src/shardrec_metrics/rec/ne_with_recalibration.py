"""NE (and log loss with `include_logloss=True`) of recalibrated predictions: NE's states and
formulas (ne.py) over p / (p + (1 - p) / c), c = `recalibration_coefficient`
(_recalibration.py). Keys: `recalibrated_ne-<task>|lifetime_ne`, `...|window_ne`."""

from __future__ import annotations

from shardrec_metrics.rec._recalibration import RecalibratedComputation
from shardrec_metrics.rec.metrics_namespace import MetricNamespace
from shardrec_metrics.rec.ne import NEMetricComputation, get_ne_states
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = ["RecalibratedNEMetric", "RecalibratedNEMetricComputation", "get_ne_states"]


class RecalibratedNEMetricComputation(RecalibratedComputation, NEMetricComputation):
    """NEMetricComputation fed recalibrated predictions."""


class RecalibratedNEMetric(RecMetric):
    _namespace = MetricNamespace.RECALIBRATED_NE
    _computation_class = RecalibratedNEMetricComputation
