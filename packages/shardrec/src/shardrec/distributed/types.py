"""Sharding types and environment (TorchRec path `torchrec.distributed.types`)."""

from shardrec_collectives import Awaitable, LazyAwaitable, NoWait, ShardingEnv
from shardrec_planner import (
    EnumerableShardingSpec,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
    ShardMetadata,
)

__all__ = [
    "Awaitable",
    "EnumerableShardingSpec",
    "LazyAwaitable",
    "NoWait",
    "ParameterSharding",
    "ShardMetadata",
    "ShardingEnv",
    "ShardingPlan",
    "ShardingType",
]
