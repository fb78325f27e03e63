"""The disk tier in the cost model: what a tiered (`key_value`) shard costs in memory, on disk
and in disk traffic per step, and which cache sizes the planner tries.

A tiered table runs as one tiered table per shard (shardrec-tiered, docs/tiered.md): each rank's
shard, whatever the sharding type (table_wise: the table; row_wise / table_row_wise: a row block;
column_wise / table_column_wise: a column block; grid_shard: both), keeps every one of its rows
and their optimizer state in a flat file on the rank's disk and a cache of
`cache_rows = max(1, min(r, round(load_factor * r)))` of them in memory. For a shard of `r` rows
x `c` columns whose ids are a share `q` of the table's ids (`q = r / R` for the row-split types
over a table of R rows, uniform access over row blocks; `q = 1` for table_wise and the
column-split types, whose every shard sees every id):

    row     (c * (1 + state floats per element) + state floats per row) * 4 bytes  (float32)
    memory  cache_rows * (row + SLOT_META_BYTES)                        the cache and its metadata
            + r * MAP_BYTES_PER_ROW                                    the dense id -> slot map
            (+ the fused kernel's input / output buffers, as any shard)
    disk    STORE_HEADER_BYTES + r * row                               the store file
    lookups min(r, q * L)                                              distinct rows per step
    misses  lookups * miss_rate(load_factor)                           rows read per step
    traffic misses * row read + as many written back                   (every looked-up row is
                                                                       updated, so it is dirty
                                                                       when it is evicted)
    time    the fused estimate + traffic / disk_bw                     (no overlap modelled:
                                                                       the prefetch pipeline
                                                                       hides part of it)

`L` (distinct ids of the table per step) and `miss_rate` come from the table's
`CacheParams.stats` (TorchRec's `CacheStatistics`: `expected_lookups`,
`expected_miss_rate(clf)`; e.g. `SampledCacheStatistics` on a sample of ids); without it the
table's ids per step are taken as distinct and uniform over the rows (`UniformCacheStatistics`:
hit rate = load factor). Every shard has the table's hit rate (its cache is the same share of
its rows); its misses scale with its share of the ids.

A cache must hold the distinct rows of two batches (one in flight, one prefetched):
`min_cache_rows`, per shard. The planner's own load factors (`AUTO_LOAD_FACTORS`, used where the
table's `CacheParams` sets none) are raised to the largest shard's floor (`tier_load_factors`),
and of those only the sizes that buy time are kept (`undominated`).

The raw-id tier (`ssd_virtual_table` / `dram_virtual_table` on a dynamic table,
`virtual_tier_estimate`) follows the same model with the table's capacity as the cache: each
shard's `r` slots (a row_wise rank's row block) are its cache, priced as any dynamic table's
slots (rows, state, id map and metadata: dynamic_storage.py), at load factor 1; its store holds
every id's row, at least the `r * row` bytes of the ids the cache holds (it grows with the
distinct ids a run sees, which the planner cannot know), on disk (RocksDB, `ssd_cap`) or in
RAM; the misses (`CacheParams.stats`' miss rate at load factor 1, its first accesses; none
without statistics) read and write rows at `disk_bw` (disk) or the memory bandwidth (RAM).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

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
    "id_shares",
    "min_cache_rows",
    "table_lookups",
    "tier_estimate",
    "tier_load_factors",
    "undominated",
    "virtual_tier_estimate",
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
    """`AUTO_LOAD_FACTORS` raised to the two-batch floor of a `rows`-row table seeing `lookups`
    distinct rows per step, distinct, largest first."""
    return _factors_above(min_cache_rows(rows, lookups) / max(rows, 1))


def _factors_above(floor: float) -> list[float]:
    return sorted({min(1.0, max(f, _round_up(floor))) for f in AUTO_LOAD_FACTORS}, reverse=True)


def id_shares(
    rows: npt.NDArray[np.int64], table_rows: int, row_split: bool
) -> npt.NDArray[np.float64]:
    """Each shard's share `q` of the table's ids: its share of the rows for the row-split types
    (uniform access over row blocks), else 1 (every column block sees every id)."""
    if row_split:
        return rows.astype(np.float64) / max(table_rows, 1)
    return np.ones(len(rows), dtype=np.float64)


def table_lookups(cache_params: object | None, ids: float) -> float:
    """Distinct rows of the table looked up per step (`L`): its `CacheParams.stats`'
    `expected_lookups`, else every id of the global batch (`ids`)."""
    stats = getattr(cache_params, "stats", None)
    expected = getattr(stats, "expected_lookups", None)
    return float(expected) if isinstance(expected, int | float) else ids


def tier_load_factors(
    rows: npt.NDArray[np.int64], shares: npt.NDArray[np.float64], lookups: float
) -> list[float]:
    """The cache sizes the planner tries for tiered shards of `rows` rows seeing `shares` of the
    table's `lookups` distinct rows per step: `AUTO_LOAD_FACTORS` raised to the largest shard's
    two-batch floor (`min_cache_rows`), distinct, largest first."""
    floor = max(
        (min_cache_rows(int(r), q * lookups) / r for r, q in zip(rows, shares, strict=True) if r),
        default=0.0,
    )
    return _factors_above(floor)


class _Costed(Protocol):
    @property
    def total_cost(self) -> float: ...


_C = TypeVar("_C", bound=_Costed)


def undominated(sized: Sequence[_C]) -> list[_C]:
    """Of one layout's cache sizes (largest first), those that each buy time with their
    memory: a larger cache is kept only if it is estimated faster than every smaller one (with
    a hit rate that is flat over cache sizes, e.g. a sample whose misses are all first
    accesses, only the smallest cache is left, rather than an arbitrary one of equal cost)."""
    kept: list[_C] = []
    for opt in reversed(sized):  # smallest cache first
        if not kept or opt.total_cost < kept[-1].total_cost * (1.0 - 1e-9):
            kept.append(opt)
    return kept[::-1]


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
    shares: npt.NDArray[np.float64],
    table_ids: float,
    optimizer: tuple[float, float],
    load_factor: float,
    cache_stats: object | None,
    disk_bw: float,
) -> TierEstimate:
    """The cache and disk figures of tiered shards of `rows` x `cols`, each seeing a share
    `shares` (`id_shares`) of the table's `table_ids` ids per step (module docstring);
    `optimizer` is (state floats per element, per row)."""
    per_elem, per_row = optimizer
    row_bytes = (cols * (1.0 + per_elem) + per_row) * STORE_VALUE_BYTES
    cache_rows = np.array(
        [max(1, min(int(r), round(load_factor * int(r)))) if r else 0 for r in rows],
        dtype=np.int64,
    )
    memory = cache_rows * (row_bytes + SLOT_META_BYTES) + rows * MAP_BYTES_PER_ROW
    disk = np.where(rows > 0, STORE_HEADER_BYTES + rows * row_bytes, 0.0)
    stats, source = stats_of(cache_stats, table_ids)
    miss = float(stats.expected_miss_rate(load_factor))
    if not 0.0 <= miss <= 1.0 or math.isnan(miss):
        raise ValueError(f"CacheParams.stats gave a miss rate of {miss} for {load_factor}")
    # Lookups per shard: the table's distinct ids per step, split as the shards split the ids;
    # each shard looks up at most its rows.
    lookups = np.minimum(shares * float(stats.expected_lookups), rows.astype(np.float64))
    read = lookups * miss * row_bytes
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


def virtual_tier_estimate(
    *,
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    shares: npt.NDArray[np.float64],
    table_ids: float,
    optimizer: tuple[float, float],
    cache_bytes: npt.NDArray[np.float64],
    cache_stats: object | None,
    bandwidth: float,
) -> TierEstimate:
    """The raw-id tier's figures (module docstring): every slot cached (`cache_bytes`: the
    slots' memory as a dynamic table), a store of at least `rows * row` bytes, misses at
    load factor 1 read and written at `bandwidth`."""
    tier = tier_estimate(
        rows=rows,
        cols=cols,
        shares=shares,
        table_ids=table_ids,
        optimizer=optimizer,
        load_factor=1.0,
        cache_stats=cache_stats,
        disk_bw=bandwidth,
    )
    per_elem, per_row = optimizer
    store = rows * (cols * (1.0 + per_elem) + per_row) * STORE_VALUE_BYTES
    return dataclasses.replace(
        tier, memory_bytes=cache_bytes.astype(np.float64), disk_bytes=store.astype(np.float64)
    )
