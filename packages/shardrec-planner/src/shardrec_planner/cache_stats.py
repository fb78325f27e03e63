"""Expected cache hit rates: TorchRec's `CacheStatistics`, and an LRU estimate from an id sample.

An LRU cache of `C` rows hits an access exactly when its **stack distance** (the number of
distinct other ids accessed since the previous access of the same id) is below `C`; a first
access always misses. `lru_stack_distances(ids)` computes every access's distance at once, so
the hit rate of any cache size is a count:

    d(i) = #{ j : p < j < i, prev(j) < p }        p = prev(i), the previous access of ids[i]

(an access j inside the window is the first of its id there exactly when its own previous
access lies before p). Each d(i) is a prefix count of points (j, prev(j)), answered for all
queries together level by level of a merge-sort tree (numpy sorts and searchsorted, no Python
loop over ids): O(n log^2 n).

`SampledCacheStatistics(ids, num_rows=..., ids_per_batch=...)` is a `CacheStatistics` for a
table (`CacheParams.stats`, TorchRec's field): the sample is cut into batches of
`ids_per_batch` ids, each batch's distinct ids (in order of first appearance) are the cache's
lookups, as a tiered table admits a batch's distinct rows once.
"""

from __future__ import annotations

import abc
import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "CacheStatistics",
    "SampledCacheStatistics",
    "UniformCacheStatistics",
    "lru_hit_rate",
    "lru_stack_distances",
]

FIRST_ACCESS = np.iinfo(np.int64).max
"""The stack distance of an id's first access (a compulsory miss at any cache size)."""


class CacheStatistics(abc.ABC):
    """TorchRec's interface (`torchrec.distributed.types.CacheStatistics`): what a planner
    needs to know about a table's access pattern to size and price its cache."""

    @property
    @abc.abstractmethod
    def expected_lookups(self) -> float:
        """Distinct ids expected in one global training batch (the cache's lookups per step)."""

    @abc.abstractmethod
    def expected_miss_rate(self, clf: float) -> float:
        """Expected miss rate of a cache holding `clf` (0..1) of the table's rows: 1.0 at 0,
        0.0 at 1."""

    @property
    @abc.abstractmethod
    def cacheability(self) -> float:
        """0: very cacheable (high locality) .. 1: hard to cache; independent of cache size."""


def _as_ids(ids: object) -> npt.NDArray[np.int64]:
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"ids must be a 1-d sequence of ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"ids must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _previous_access(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """prev[i]: the index of the previous access of ids[i], -1 for a first access."""
    n = len(ids)
    order = np.lexsort((np.arange(n), ids))  # by id, then position
    prev = np.full(n, -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def lru_stack_distances(ids: object) -> npt.NDArray[np.int64]:
    """Per access of `ids` (1-d ints), its LRU stack distance; `FIRST_ACCESS` for first
    accesses. An LRU cache of `C` rows hits access i exactly when `distance[i] < C`."""
    arr = _as_ids(ids)
    n = len(arr)
    prev = _previous_access(arr)
    out = np.full(n, FIRST_ACCESS, dtype=np.int64)
    q = np.flatnonzero(prev >= 0)
    if not len(q):
        return out
    p = prev[q]
    # d = F(i - 1, p) - (p + 1), F(x, y) = #{j <= x : prev(j) < y}; every j <= p counts.
    # Prefix [0, L) with L = i splits into aligned blocks of 2^k for the set bits k of L.
    limit = q.copy()
    y = p
    count = np.zeros(len(q), dtype=np.int64)
    positions = np.arange(n, dtype=np.int64)
    shift = n + 2  # prev in [-1, n): prev + 1 in [0, n + 1)
    k = 0
    while (1 << k) <= n:
        block = positions >> k
        keys = np.sort(block * shift + (prev + 1))
        has = (limit >> k) & 1 == 1
        start = (limit[has] >> (k + 1)) << (k + 1)  # the block just below the prefix's end
        b = start >> k
        below = np.searchsorted(keys, b * shift + (y[has] + 1), side="left")
        count[has] += below - np.searchsorted(keys, b * shift, side="left")
        k += 1
    out[q] = count - (p + 1)
    return out


def lru_hit_rate(ids: object, cache_rows: int) -> float:
    """The hit rate of an LRU cache of `cache_rows` rows, empty at the start, over the accesses
    `ids` in order (one access per element; 0.0 for no accesses)."""
    if isinstance(cache_rows, bool) or not isinstance(cache_rows, int) or cache_rows < 0:
        raise ValueError(f"cache_rows must be an int >= 0, got {cache_rows!r}")
    dist = lru_stack_distances(ids)
    return float(np.count_nonzero(dist < cache_rows)) / len(dist) if len(dist) else 0.0


def _batch_distinct(
    ids: npt.NDArray[np.int64], per_batch: int
) -> tuple[npt.NDArray[np.int64], int]:
    """The distinct ids of each batch of `per_batch` ids, in order of first appearance, and the
    number of batches."""
    out: list[npt.NDArray[np.int64]] = []
    for lo in range(0, len(ids), per_batch):
        batch = ids[lo : lo + per_batch]
        _, first = np.unique(batch, return_index=True)
        out.append(batch[np.sort(first)])
    return (np.concatenate(out) if out else ids[:0]), len(out)


class SampledCacheStatistics(CacheStatistics):
    """A table's `CacheStatistics` measured on a sample of its ids (module docstring).

    ids: the sample, in training order (global batches concatenated); num_rows: the table's
    rows (a load factor `clf` means `round(clf * num_rows)` cached rows); ids_per_batch: ids of
    one global batch. `expected_lookups` is the mean distinct ids per batch; `cacheability`
    the share of lookups that are an id's first (misses at any cache size).
    """

    def __init__(self, ids: object, *, num_rows: int, ids_per_batch: int) -> None:
        arr = _as_ids(ids)
        if not len(arr):
            raise ValueError("SampledCacheStatistics needs a non-empty id sample")
        if num_rows < 1 or ids_per_batch < 1:
            raise ValueError(
                f"num_rows and ids_per_batch must be >= 1, got {num_rows}, {ids_per_batch}"
            )
        if arr.min() < 0 or arr.max() >= num_rows:
            raise ValueError(
                f"ids must be in [0, {num_rows}) (the table's rows), got [{arr.min()}, {arr.max()}]"
            )
        lookups, batches = _batch_distinct(arr, ids_per_batch)
        self.num_rows = num_rows
        self._distances = np.sort(lru_stack_distances(lookups))
        self._expected = len(lookups) / batches

    @property
    def expected_lookups(self) -> float:
        return self._expected

    def cache_rows(self, clf: float) -> int:
        return max(0, min(self.num_rows, round(clf * self.num_rows)))

    def expected_miss_rate(self, clf: float) -> float:
        if not 0.0 <= clf <= 1.0 or math.isnan(clf):
            raise ValueError(f"clf (the cached share of rows) must be in [0, 1], got {clf}")
        hits = int(np.searchsorted(self._distances, self.cache_rows(clf), side="left"))
        return 1.0 - hits / len(self._distances)

    @property
    def cacheability(self) -> float:
        return float(np.count_nonzero(self._distances == FIRST_ACCESS)) / len(self._distances)


class UniformCacheStatistics(CacheStatistics):
    """The planner's assumption without statistics: ids uniform over the rows, so a cache of a
    share `clf` of them hits `clf` of the lookups, and each id looked up is distinct."""

    def __init__(self, expected_lookups: float) -> None:
        self._expected = float(expected_lookups)

    @property
    def expected_lookups(self) -> float:
        return self._expected

    def expected_miss_rate(self, clf: float) -> float:
        return 1.0 - min(max(clf, 0.0), 1.0)

    @property
    def cacheability(self) -> float:
        return 1.0
