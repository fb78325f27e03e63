"""Compute kernels and the sharder kinds (TorchRec path `torchrec.distributed.embedding_types`)."""

from shardrec_planner import EmbeddingComputeKernel, ShardingType
from shardrec_planner.sharder_data import BaseEmbeddingSharder, BaseQuantEmbeddingSharder

__all__ = [
    "BaseEmbeddingSharder",
    "BaseQuantEmbeddingSharder",
    "EmbeddingComputeKernel",
    "ShardingType",
]
