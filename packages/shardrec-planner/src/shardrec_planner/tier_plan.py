"""What a tiered option puts in the plan: its cache size in `CacheParams`, its figures in the
report (`TierDecision`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from shardrec_planner.cache_params import CacheParams
from shardrec_planner.disk_tier import TierEstimate
from shardrec_planner.options import Option
from shardrec_planner.stats import TierDecision, TierShard


def tier_cache_params(given: object | None, tier: TierEstimate) -> CacheParams:
    """The table's `CacheParams` (a copy) with the planner's cache size, or new ones."""
    if isinstance(given, CacheParams):
        out = copy.copy(given)
        out.load_factor = tier.load_factor
        return out
    return CacheParams(load_factor=tier.load_factor)


def tier_decision(opt: Option, ranks: Sequence[int]) -> TierDecision:
    """The report's figures of a tiered option placed on `ranks` (one per shard): summed over
    its shards, and per shard."""
    tier = opt.tier
    assert tier is not None  # only called for tiered options
    shards = tuple(
        TierShard(
            rank=int(rank),
            row_offset=int(opt.shards.row_offsets[s]),
            rows=int(opt.shards.rows[s]),
            col_offset=int(opt.shards.col_offsets[s]),
            cols=int(opt.shards.cols[s]),
            cache_rows=int(tier.cache_rows[s]),
            cache_bytes=int(tier.memory_bytes[s]),
            disk_bytes=int(tier.disk_bytes[s]),
            read_bytes_per_step=float(tier.read_bytes[s]),
            disk_seconds_per_step=float(tier.seconds[s]),
        )
        for s, rank in enumerate(ranks)
    )
    return TierDecision(
        load_factor=tier.load_factor,
        cache_rows=int(tier.cache_rows.sum()),
        cache_bytes=int(tier.memory_bytes.sum()),
        disk_bytes=int(tier.disk_bytes.sum()),
        hit_rate=tier.hit_rate,
        hit_rate_source=tier.hit_rate_source,
        read_bytes_per_step=float(tier.read_bytes.sum()),
        write_bytes_per_step=float(tier.write_bytes.sum()),
        disk_seconds_per_step=float(tier.seconds.sum()),
        shards=shards,
    )
