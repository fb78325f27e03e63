"""The disk tier in the cost model: what a tiered (`key_value`) shard costs in memory, on disk
and in disk traffic per step.

A tiered shard (shardrec-tiered, docs/tiered.md) keeps every row and its optimizer state in a
flat file on the rank's disk and `cache_rows = round(load_factor * r)` of them in memory:

    memory  cache_rows * (row + optimizer state + SLOT_META_BYTES)    the cache and its metadata
            + r * MAP_BYTES_PER_ROW                                    the dense id -> slot map
            (+ the fused kernel's input / output buffers, as any shard)
    disk    STORE_HEADER_BYTES + r * (dim + state floats) * 4          the store file (float32)
    misses  lookups * miss_rate(load_factor)                          rows read per step
    traffic misses * row_bytes read + as many written back             (every looked-up row is
                                                                       updated, so it is dirty
                                                                       when it is evicted)
    time    the fused estimate + traffic / disk_bw                     (no overlap modelled:
                                                                       the prefetch pipeline
                                                                       hides part of it)

`lookups` (distinct ids per step) and `miss_rate` come from the table's `CacheParams.stats`
(TorchRec's `CacheStatistics`: `expected_lookups`, `expected_miss_rate(clf)`; e.g.
`SampledCacheStatistics` on a sample of ids); without it the shard's ids per step are taken as
distinct and uniform over the rows (`UniformCacheStatistics`: hit rate = load factor).

A cache must hold the distinct rows of two batches (one in flight, one prefetched):
`min_cache_rows`. The planner's own load factors (`AUTO_LOAD_FACTORS`, used where the table's
`CacheParams` sets none) are raised to that floor.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from shardrec_planner.cache_stats import CacheStatistics, UniformCacheStatistics

__all__ = [
    "AUTO_LOAD_FACTORS",
    "MAP_BYTES_PER_ROW",
    "SLOT_META_BYTES",
    "STORE_HEADER_BYTES",
    "TierEstimate",
    "auto_load_factors",
    "min_cache_rows",
    "tier_estimate",
]

SLOT_META_BYTES = 8 + 4 + 1 + 8
"""Per cached row: the row it holds (int64), pins (int32), dirty (bool), LRU/LFU score (int64)."""
MAP_BYTES_PER_ROW = 4
"""The dense id -> slot map: one int32 per table row, in memory."""
STORE_HEADER_BYTES = 4096
STORE_VALUE_BYTES = 4
"""The store keeps weights and optimizer state as float32."""

AUTO_LOAD_FACTORS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
"""Cache sizes (shares of the rows) the planner tries for a tiered table whose CacheParams
sets no load_factor."""
BATCHES_IN_CACHE = 2
"""A batch in flight and the next one prefetched."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TierEstimate:
    """One tiered option's cache and disk figures (per shard arrays, in shard order).

    `load_factor` is the one written into the plan's CacheParams; `hit_rate` the expected share
    of lookups the cache serves; `hit_rate_source` where it came from."""

    load_factor: float
    cache_rows: npt.NDArray[np.int64]
    memory_bytes: npt.NDArray[np.float64]
    disk_bytes: npt.NDArray[np.float64]
    read_bytes: npt.NDArray[np.float64]
    write_bytes: npt.NDArray[np.float64]
    seconds: npt.NDArray[np.float64]
    hit_rate: float
    hit_rate_source: str


def stats_of(cache_stats: object | None, lookups: float) -> tuple[CacheStatistics, str]:
    """The table's statistics (duck-typed as TorchRec's CacheStatistics), else uniform access."""
    if cache_stats is not None:
        miss = getattr(cache_stats, "expected_miss_rate", None)
        if not callable(miss) or not hasattr(cache_stats, "expected_lookups"):
            raise TypeError(
                "CacheParams.stats must be a CacheStatistics (expected_lookups, "
                f"expected_miss_rate(clf)), got {type(cache_stats).__name__}"
            )
        return cache_stats, "CacheParams.stats"  # type: ignore[return-value]  # duck-typed
    return UniformCacheStatistics(lookups), "uniform ids assumed: no CacheParams.stats"


def min_cache_rows(rows: int, lookups: float) -> int:
    """Rows a cache of a `rows`-row shard needs: two batches' distinct rows, at most `rows`."""
    return min(rows, max(1, math.ceil(BATCHES_IN_CACHE * lookups)))


def auto_load_factors(rows: int, lookups: float) -> list[float]:
    """`AUTO_LOAD_FACTORS` raised to the two-batch floor, distinct, largest first."""
    floor = min_cache_rows(rows, lookups) / max(rows, 1)
    out = sorted({min(1.0, max(f, _round_up(floor))) for f in AUTO_LOAD_FACTORS}, reverse=True)
    return out


def _round_up(x: float) -> float:
    """`x` rounded up to 4 significant digits (a readable load factor still >= x)."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (3 - math.floor(math.log10(x)))
    return math.ceil(x * scale) / scale


def tier_estimate(
    *,
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    ids_in: npt.NDArray[np.float64],
    optimizer: tuple[float, float],
    load_factor: float,
    cache_stats: object | None,
    disk_bw: float,
) -> TierEstimate:
    """The cache and disk figures of tiered shards of `rows` x `cols` looking up `ids_in` ids per
    step each (module docstring); `optimizer` is (state floats per element, per row)."""
    per_elem, per_row = optimizer
    row_bytes = (cols * (1.0 + per_elem) + per_row) * STORE_VALUE_BYTES
    cache_rows = np.array(
        [max(1, min(int(r), round(load_factor * int(r)))) if r else 0 for r in rows],
        dtype=np.int64,
    )
    memory = cache_rows * (row_bytes + SLOT_META_BYTES) + rows * MAP_BYTES_PER_ROW
    disk = np.where(rows > 0, STORE_HEADER_BYTES + rows * row_bytes, 0.0)
    total_ids = float(ids_in.sum())
    stats, source = stats_of(cache_stats, total_ids)
    miss = float(stats.expected_miss_rate(load_factor))
    if not 0.0 <= miss <= 1.0 or math.isnan(miss):
        raise ValueError(f"CacheParams.stats gave a miss rate of {miss} for {load_factor}")
    # Lookups per shard: the statistics' distinct ids per global batch, split as the shards
    # split the ids (uniform access over row blocks); each shard looks up at most its rows.
    share = ids_in / total_ids if total_ids > 0 else np.zeros_like(ids_in)
    lookups = np.minimum(share * float(stats.expected_lookups), rows.astype(np.float64))
    misses = lookups * miss
    read = misses * row_bytes
    return TierEstimate(
        load_factor=load_factor,
        cache_rows=cache_rows,
        memory_bytes=memory.astype(np.float64),
        disk_bytes=disk.astype(np.float64),
        read_bytes=read,
        write_bytes=read.copy(),
        seconds=2.0 * read / disk_bw,
        hit_rate=1.0 - miss,
        hit_rate_source=source,
    )
