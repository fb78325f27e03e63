"""The planner (TorchRec path `torchrec.distributed.planner.planners`)."""

from shardrec_planner import EmbeddingShardingPlanner
from shardrec_planner.kernel_validation import validate_compute_kernels

__all__ = ["EmbeddingShardingPlanner", "validate_compute_kernels"]
