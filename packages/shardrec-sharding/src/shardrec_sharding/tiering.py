"""Which local tables are tiered (rows on disk behind a cache), from their plan entry.

A table planned with `compute_kernel="key_value"` runs on a `shardrec_tiered` lookup: its
`KeyValueParams.ssd_storage_directory` is the store directory (default `<cwd>/tier-store`),
`CacheParams.load_factor` the cached fraction of its local rows and `CacheParams.algorithm` the
replacement policy (LRU or LFU).
"""

from __future__ import annotations

from shardrec_tiered import CachePolicy, TieredOptions

from shardrec_planner import EmbeddingComputeKernel, ParameterSharding
from shardrec_planner.cache_params import CacheAlgorithm

__all__ = ["TIERED_KERNELS", "tier_options"]

TIERED_KERNELS = frozenset({EmbeddingComputeKernel.KEY_VALUE})
"""Plan kernels whose tables run tiered. The virtual-table kernels (raw ids) join them with the
raw-id tables."""


def tier_options(ps: ParameterSharding) -> TieredOptions | None:
    """The tier of a table planned as `ps`, or None for an in-memory table."""
    if ps.compute_kernel not in TIERED_KERNELS:
        return None
    kv, cache = ps.key_value_params, ps.cache_params
    algorithm = None if cache is None else cache.algorithm
    return TieredOptions(
        store_dir=None if kv is None else kv.ssd_storage_directory,
        load_factor=None if cache is None else cache.load_factor,
        policy=CachePolicy.LFU if algorithm is CacheAlgorithm.LFU else CachePolicy.LRU,
    )
