"""The planner (TorchRec path `torchrec.distributed.planner.planners`)."""

from shardrec_planner import EmbeddingShardingPlanner
from shardrec_planner.kernel_validation import validate_compute_kernels
from shardrec_planner.pluggable import extract_plan, validate_modules_inclusion_in_sharding_plan

__all__ = [
    "EmbeddingShardingPlanner",
    "extract_plan",
    "validate_compute_kernels",
    "validate_modules_inclusion_in_sharding_plan",
]
