"""Sharding types and environment (TorchRec path `torchrec.distributed.types`)."""

from torch.distributed._shard.sharded_tensor.api import ShardedTensor

from shardrec_collectives import Awaitable, LazyAwaitable, LazyNoWait, NoWait, ShardingEnv
from shardrec_collectives.awaitable import GetItemLazyAwaitable, LazyGetItemMixin
from shardrec_collectives.qcomm import (
    CommOp,
    NoOpQuantizedCommCodec,
    QuantizationContext,
    QuantizedCommCodec,
    QuantizedCommCodecs,
)
from shardrec_embedding import DataType
from shardrec_planner import (
    EmbeddingModuleShardingPlan,
    EnumerableShardingSpec,
    ModuleSharder,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
    ShardMetadata,
)
from shardrec_planner.cache_params import (
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
    MultiPassPrefetchConfig,
)
from shardrec_planner.cache_stats import CacheStatistics
from shardrec_planner.shard_storage import (
    PipelineType,
    compute_storage_usage,
    get_tensor_size_bytes,
)
from shardrec_planner.sharder_data import StorageUsageType

__all__ = [
    "Awaitable",
    "BoundsCheckMode",
    "CacheAlgorithm",
    "CacheParams",
    "CacheStatistics",
    "DataType",
    "EmbeddingModuleShardingPlan",
    "EnumerableShardingSpec",
    "GetItemLazyAwaitable",
    "KeyValueParams",
    "LazyAwaitable",
    "LazyGetItemMixin",
    "LazyNoWait",
    "ModuleSharder",
    "MultiPassPrefetchConfig",
    "NoWait",
    "ParameterSharding",
    "PipelineType",
    "ShardMetadata",
    "ShardedTensor",
    "ShardingEnv",
    "ShardingPlan",
    "ShardingType",
    "StorageUsageType",
    "compute_storage_usage",
    "get_tensor_size_bytes",
]
# Quantized communication (issue 28): the codec types TorchRec keeps in this module.
__all__ += [
    "CommOp",
    "NoOpQuantizedCommCodec",
    "QuantizationContext",
    "QuantizedCommCodec",
    "QuantizedCommCodecs",
]
