"""Sharding (TorchRec path `torchrec.distributed`)."""

from shardrec_collectives import Awaitable, NoWait, ShardingEnv
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist
from shardrec_planner import ParameterSharding
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder

__all__ = [
    "Awaitable",
    "DistributedModelParallel",
    "EmbeddingBagCollectionSharder",
    "EmbeddingCollectionSharder",
    "NoWait",
    "ParameterSharding",
    "ShardingEnv",
    "TrainPipelineSparseDist",
]
