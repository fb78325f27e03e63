"""TorchRec's enumerator (TorchRec path `torchrec.distributed.planner.enumerators`)."""

from shardrec_planner.enumerators import (
    EmbeddingEnumerator,
    ShardEstimator,
    get_partition_by_type,
)

__all__ = [
    "EmbeddingEnumerator",
    "ShardEstimator",
    "get_partition_by_type",
]
