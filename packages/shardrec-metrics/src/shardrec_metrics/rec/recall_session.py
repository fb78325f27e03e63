"""Session-level recall (TorchRec's `recall_session`): defined with the other session metric
in _session.py."""

from shardrec_metrics.rec._session import RecallSessionMetric, RecallSessionMetricComputation

__all__ = ["RecallSessionMetric", "RecallSessionMetricComputation"]
