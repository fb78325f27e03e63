"""Which local tables are tiered (rows on disk behind a cache), from their plan entry.

A table the planner's `runs_tiered` names (today: `key_value`, table_wise) runs on a
`shardrec_tiered` lookup: `<KeyValueParams.ssd_storage_directory>/rank-<r>` holds the store
(default `<cwd>/tier-store/rank-<r>`, so ranks sharing a disk never share a file),
`CacheParams.load_factor` the cached fraction of its local rows and `CacheParams.algorithm` the
replacement policy (LRU or LFU).

A dynamic table planned `ssd_virtual_table` / `dram_virtual_table` (table_wise) keeps every
raw id's row in a store (`virtual_store`; virtual_tier.py builds the cache).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from shardrec_planner import ParameterSharding
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_planner.enums import EmbeddingComputeKernel
from shardrec_planner.kernel_choice import runs_tiered
from shardrec_tiered import (
    CachePolicy,
    KeyValueRows,
    MemoryRows,
    StoreLayout,
    TieredOptions,
    default_store_dir,
)

__all__ = ["tier_options", "virtual_store"]


def tier_options(ps: ParameterSharding, rank: int) -> TieredOptions | None:
    """The tier of `rank`'s shard of a table planned as `ps`, or None for an in-memory table."""
    if not runs_tiered(ps):
        return None
    kv, cache = ps.key_value_params, ps.cache_params
    algorithm = None if cache is None else cache.algorithm
    root = (kv.ssd_storage_directory if kv else None) or default_store_dir()
    return TieredOptions(
        store_dir=os.path.join(root, f"rank-{rank}"),
        load_factor=None if cache is None else cache.load_factor,
        policy=CachePolicy.LFU if algorithm is CacheAlgorithm.LFU else CachePolicy.LRU,
    )


def virtual_store(
    ps: ParameterSharding, rank: int
) -> tuple[CachePolicy, Callable[[StoreLayout], KeyValueRows]]:
    """The cache policy and the store factory of `rank`'s raw-id tier of a table planned
    `ssd_virtual_table` (RocksDB in `<ssd_storage_directory>/rank-<r>`, from the optional
    shardrec-kvstore package) or `dram_virtual_table` (RAM)."""
    cache = ps.cache_params
    lfu = cache is not None and cache.algorithm is CacheAlgorithm.LFU
    policy = CachePolicy.LFU if lfu else CachePolicy.LRU
    if ps.compute_kernel is not EmbeddingComputeKernel.SSD_VIRTUAL_TABLE:
        return policy, lambda layout: MemoryRows(layout.stride)
    try:
        # Optional (it brings the RocksDB binary wheel): `pip install shardrec[kvstore]`.
        kvstore = importlib.import_module("shardrec_kvstore")
    except ImportError as e:
        raise ImportError(
            "compute kernel 'ssd_virtual_table' keeps rows in RocksDB through the "
            "shardrec-kvstore package, which is not installed: pip install shardrec-kvstore "
            "(or shardrec[kvstore]), or plan 'dram_virtual_table' (rows in RAM)"
        ) from e
    kv = ps.key_value_params
    directory = os.path.join(
        (kv.ssd_storage_directory if kv else None) or default_store_dir(), f"rank-{rank}"
    )

    def open_store(layout: StoreLayout) -> KeyValueRows:
        row_layout = kvstore.RowLayout(table=layout.table, dim=layout.dim, state=layout.state)
        store: KeyValueRows = kvstore.RocksRowStore(directory, row_layout)
        return store

    return policy, open_store
