"""TorchRec's perf-estimator registry (TorchRec path `torchrec.distributed.planner.estimator`)."""

from shardrec_planner.perf_estimator_factory import (
    DEFAULT_PERF_ESTIMATOR,
    EmbeddingPerfEstimatorFactory,
)
from shardrec_planner.shard_perf import EmbeddingPerfEstimator

__all__ = ["DEFAULT_PERF_ESTIMATOR", "EmbeddingPerfEstimator", "EmbeddingPerfEstimatorFactory"]
