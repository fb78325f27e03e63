"""Which local tables are tiered (rows on disk behind a cache), from their plan entry.

A table the planner's `runs_tiered` names (`key_value`, any sharding type but data_parallel)
runs on a `shardrec_tiered` lookup on every rank holding a shard of it: the shard (its row block,
its column blocks) is a tiered table of its own, `<KeyValueParams.ssd_storage_directory>/rank-<r>`
holds its store (default `<cwd>/tier-store/rank-<r>`, so ranks sharing a disk never share a
file), `CacheParams.load_factor` is the cached fraction of the shard's rows and
`CacheParams.algorithm` the replacement policy (LRU or LFU). The tiered lookups' learning rates
are in the collection's `fused_optimizer` (`TieredFusedOptimizer`).
"""

from __future__ import annotations

import os

from torch import nn

from shardrec_planner import ParameterSharding
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_planner.kernel_choice import runs_tiered
from shardrec_tiered import CachePolicy, TieredFusedEmbeddingBag, TieredOptions, default_store_dir

__all__ = ["tier_options", "tiered_lookups"]


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


def tiered_lookups(module: nn.Module) -> list[TieredFusedEmbeddingBag]:
    """This rank's tiered lookups in every sharded collection under `module` (e.g. a
    DistributedModelParallel): their `stats()`, `flush()`, `fused_optimizer`."""
    out: list[TieredFusedEmbeddingBag] = []
    for m in module.modules():
        for strategy in getattr(m, "_strategies", ()):
            lookup = getattr(strategy, "lookup", None)
            if lookup is not None and hasattr(lookup, "tiered_modules"):
                out.extend(lookup.tiered_modules())
    return out
