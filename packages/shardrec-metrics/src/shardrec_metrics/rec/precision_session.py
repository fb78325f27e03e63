"""Session-level precision (TorchRec's `precision_session`): defined with the other session metric
in _session.py."""

from shardrec_metrics.rec._session import PrecisionSessionMetric, PrecisionSessionMetricComputation

__all__ = ["PrecisionSessionMetric", "PrecisionSessionMetricComputation"]
