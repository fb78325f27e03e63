"""What a tiered option puts in the plan: its cache size in `CacheParams`, its figures in the
report (`TierDecision`)."""

from __future__ import annotations

import copy

from shardrec_planner.cache_params import CacheParams
from shardrec_planner.disk_tier import TierEstimate
from shardrec_planner.options import Option
from shardrec_planner.stats import TierDecision


def tier_cache_params(given: object | None, tier: TierEstimate) -> CacheParams:
    """The table's `CacheParams` (a copy) with the planner's cache size, or new ones."""
    if isinstance(given, CacheParams):
        out = copy.copy(given)
        out.load_factor = tier.load_factor
        return out
    return CacheParams(load_factor=tier.load_factor)


def tier_decision(opt: Option) -> TierDecision:
    """The report's figures of a tiered option, summed over its shards."""
    tier = opt.tier
    assert tier is not None  # only called for tiered options
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
    )
