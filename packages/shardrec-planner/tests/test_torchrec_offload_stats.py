"""Estimate checks and TorchRec's cache statistics, against the miss-ratio curve by hand.

A histogram [a, b, c] over a table of h rows has bins of h / 3 rows (edges 0, h/3, 2h/3, h); a
cache of k >= 1 rows hits the lookups of every bin whose lower edge is <= k - 1, so its miss
rate is 1 - hits / (a + b + c); a cache of 0 rows hits nothing.
"""

from __future__ import annotations

import math

import pytest
import torch

from shardrec_planner import Perf
from shardrec_planner.offload_stats import (
    EmbeddingOffloadStats,
    InvalidEstimateError,
    _validate_io_sizes,
    _validate_perf,
)


def test_miss_rate_by_hand() -> None:
    stats = EmbeddingOffloadStats(
        cacheability=0.5, expected_lookups=7, mrc_hist_counts=torch.tensor([5, 3, 2]), height=30
    )
    assert stats.expected_miss_rate(0.0) == 1.0  # no cache
    assert stats.expected_miss_rate(1.0) == 0.0  # the whole table
    # 5 rows: bin 0 only (lower edge 0 <= 4): hits 5 of 10
    assert stats.expected_miss_rate(5 / 30) == pytest.approx(1 - 5 / 10)
    # 15 rows: bins 0 and 1 (lower edges 0, 10 <= 14): hits 8 of 10
    assert stats.expected_miss_rate(0.5) == pytest.approx(1 - 8 / 10)
    # 25 rows: all three bins
    assert stats.expected_miss_rate(25 / 30) == pytest.approx(0.0)


def test_no_lookups_means_no_misses() -> None:
    rates = EmbeddingOffloadStats.estimate_cache_miss_rate(
        torch.tensor([0.0, 3.0]), torch.tensor([0, 0, 0]), torch.tensor([0.0, 1.0, 2.0, 3.0])
    )
    assert rates.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("hist", [torch.tensor([]), torch.ones(2, 2)])
def test_bad_histogram_is_refused(hist: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="mrc_hist_counts"):
        EmbeddingOffloadStats(cacheability=0.1, expected_lookups=1, mrc_hist_counts=hist, height=4)


def test_estimate_checks_name_the_first_bad_field() -> None:
    _validate_perf(Perf(1.0, 2.0, 3.0, 4.0), "t", "table_wise")
    with pytest.raises(InvalidEstimateError, match=r"Perf\.fwd_comms"):
        _validate_perf(Perf(1.0, math.nan, 3.0, -4.0), "t", "table_wise")
    with pytest.raises(ValueError, match=r"Perf\.bwd_comms=-4\.0"):
        _validate_perf(Perf(1.0, 2.0, 3.0, -4.0), "t", "row_wise")
    _validate_io_sizes([1, 2], [3, 4], "row_wise")
    with pytest.raises(ValueError, match=r"output_sizes\[1\]=-4"):
        _validate_io_sizes([1, 2], [3, -4], "row_wise")
    with pytest.raises(ValueError, match=r"NaN detected in input_sizes\[0\]"):
        _validate_io_sizes([math.nan], [3], "row_wise")
