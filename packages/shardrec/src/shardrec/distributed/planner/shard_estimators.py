"""TorchRec's shard estimators (TorchRec path `torchrec.distributed.planner.shard_estimators`).

TorchRec's perf and storage formulas, in TorchRec's units (ms, bytes); our planner's own cost
model is `shardrec_planner.estimator` ([planner.md](../../../../../../docs/planner.md)).

`_calculate_shard_io_sizes`, `_calculate_storage_specific_sizes` and `_get_optimizer_multipler`
stand for `shardrec_planner.shard_storage`'s (TorchRec's tests patch them here to change what
`calculate_shard_storages` computes).
"""

from shardrec_planner import shard_storage as _shard_storage
from shardrec_planner.forwarding import forward_attributes
from shardrec_planner.offload_stats import (
    EmbeddingOffloadStats,
    InvalidEstimateError,
    _validate_io_sizes,
    _validate_perf,
)
from shardrec_planner.shard_perf import EmbeddingPerfEstimator
from shardrec_planner.shard_storage import (
    EmbeddingStorageEstimator,
    PipelineType,
    _calculate_cw_shard_io_sizes,
    _calculate_dp_shard_io_sizes,
    _calculate_rw_shard_io_sizes,
    _calculate_shard_io_sizes,
    _calculate_storage_specific_sizes,
    _calculate_tw_shard_io_sizes,
    _calculate_twrw_shard_io_sizes,
    _get_optimizer_multipler,
    calculate_pipeline_io_cost,
    calculate_shard_storages,
)

__all__ = [
    "EmbeddingOffloadStats",
    "EmbeddingPerfEstimator",
    "EmbeddingStorageEstimator",
    "InvalidEstimateError",
    "PipelineType",
    "_calculate_cw_shard_io_sizes",
    "_calculate_dp_shard_io_sizes",
    "_calculate_rw_shard_io_sizes",
    "_calculate_shard_io_sizes",
    "_calculate_storage_specific_sizes",
    "_calculate_tw_shard_io_sizes",
    "_calculate_twrw_shard_io_sizes",
    "_get_optimizer_multipler",
    "_validate_io_sizes",
    "_validate_perf",
    "calculate_pipeline_io_cost",
    "calculate_shard_storages",
]

forward_attributes(
    __name__,
    _shard_storage,
    ["_calculate_shard_io_sizes", "_calculate_storage_specific_sizes", "_get_optimizer_multipler"],
)
