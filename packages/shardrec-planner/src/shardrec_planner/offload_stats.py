"""Checks on estimates, and TorchRec's cache statistics for offloaded (UVM-cached) tables.

`EmbeddingOffloadStats` turns a table's LRU miss-ratio curve into the miss rate of a cache of a
given load factor. The curve is a histogram of `n` bins with edges 0, height / n, ..., height:
bin i counts the lookups whose LRU stack distance falls in it. A cache of k >= 1 rows hits every
bin whose lower edge is <= k - 1 (TorchRec's reading of the curve), so its miss rate is
1 - (those bins' counts) / (all counts); a cache of 0 rows misses everything. No recorded
lookups: no misses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from shardrec_planner.errors import InvalidValueError
from shardrec_planner.planner_types import Perf


class InvalidEstimateError(InvalidValueError):
    """An estimate that is NaN or negative: a bug in an estimator or its inputs (also an
    `AssertionError`, as TorchRec's callers expect)."""


def _check(value: float, what: str, context: str) -> None:
    if math.isnan(value):
        raise InvalidEstimateError(f"NaN detected in {what} ({context})")
    if value < 0:
        raise InvalidEstimateError(f"Negative value detected in {what}={value} ({context})")


def _validate_io_sizes(
    input_sizes: Sequence[float], output_sizes: Sequence[float], sharding_type: str
) -> None:
    """Raise `InvalidEstimateError` for the first NaN or negative input, then output, size."""
    for name, sizes in (("input_sizes", input_sizes), ("output_sizes", output_sizes)):
        for i, size in enumerate(sizes):
            _check(float(size), f"{name}[{i}]", f"sharding type {sharding_type}")


def _validate_perf(perf: Perf, table_name: str, sharding_type: str) -> None:
    """Raise `InvalidEstimateError` for the first NaN or negative field of `perf`, in order."""
    for field in dataclasses.fields(perf):
        value = float(getattr(perf, field.name))
        _check(value, f"Perf.{field.name}", f"table {table_name}, sharding type {sharding_type}")


class EmbeddingOffloadStats:
    """A table's cache statistics: `cacheability`, `expected_lookups` (unique ids per global
    batch), the miss-ratio-curve histogram `mrc_hist_counts` (1-d, non-empty) and `height`
    (the table's rows)."""

    def __init__(
        self,
        cacheability: float,
        expected_lookups: int,
        mrc_hist_counts: torch.Tensor,
        height: int,
    ) -> None:
        if mrc_hist_counts.dim() != 1:
            raise ValueError(
                f"mrc_hist_counts must be a 1-d histogram, got {mrc_hist_counts.dim()}d"
            )
        if mrc_hist_counts.numel() == 0:
            raise ValueError("mrc_hist_counts must not be empty; give at least one bin")
        self.cacheability = cacheability
        self.expected_lookups = expected_lookups
        self.height = height
        self.hist = mrc_hist_counts
        self.bins = torch.linspace(0, height, len(mrc_hist_counts) + 1)

    def expected_miss_rate(self, clf: float) -> float:
        """The miss rate of a cache holding `clf` of the table's rows."""
        size = torch.tensor(clf * self.height)
        return float(self.estimate_cache_miss_rate(size, self.hist, self.bins).item())

    @staticmethod
    def estimate_cache_miss_rate(
        cache_sizes: torch.Tensor, hist: torch.Tensor, bins: torch.Tensor
    ) -> torch.Tensor:
        """Miss rate of LRU caches of `cache_sizes` rows, from the histogram `hist` over `bins`."""
        hits = hist.cumsum(dim=0).to(torch.float32)
        if hits[-1] == 0:
            return torch.zeros_like(cache_sizes, dtype=torch.float32)
        miss = 1 - hits / hits[-1]
        # index = the number of edges <= k - 1: 0 hits nothing, n + 1 (past the end) everything.
        index = torch.bucketize(cache_sizes - 1, bins, right=True)
        padded = torch.cat((torch.ones(1), miss, torch.zeros(1)))
        return padded[index.clamp(0, len(padded) - 1)]
