"""Sharding (TorchRec path `torchrec.distributed`)."""

from shardrec_collectives import Awaitable, NoWait, ShardingEnv, get_local_rank, get_local_size
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist
from shardrec_planner import ModuleSharder, ParameterSharding
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder

__all__ = [
    "Awaitable",
    "DistributedModelParallel",
    "EmbeddingBagCollectionSharder",
    "EmbeddingCollectionSharder",
    "ModuleSharder",
    "NoWait",
    "ParameterSharding",
    "ShardingEnv",
    "TrainPipelineSparseDist",
    "get_local_rank",
    "get_local_size",
]
