"""How far a per-rank load is from even: TorchRec's imbalance measures of its plan stats.

Each measure compares a distribution `p` over k ranks (normalized to sum 1) with the uniform
one, q_i = 1/k: zero when every rank carries the same load, largest when one rank carries all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def normalize(values: Sequence[float]) -> list[float]:
    """`values` scaled to sum to 1 (a distribution over ranks)."""
    total = sum(values)
    if total == 0:
        raise ValueError(f"cannot normalize loads that sum to 0: {list(values)}")
    return [v / total for v in values]


def total_variation(p: Sequence[float]) -> float:
    """max_i |p_i - 1/k|."""
    k = len(p)
    return max(abs(pi - 1 / k) for pi in p)


def total_distance(p: Sequence[float]) -> float:
    """sum_i |p_i - 1/k|."""
    k = len(p)
    return sum(abs(pi - 1 / k) for pi in p)


def chi_sq_divergence(p: Sequence[float]) -> float:
    """sum_i (p_i - 1/k)^2 / (1/k)."""
    k = len(p)
    return sum((pi - 1 / k) * (pi - 1 / k) * k for pi in p)


def kl_divergence(p: Sequence[float]) -> float:
    """sum_i p_i log(p_i / (1/k)), with 0 log 0 = 0."""
    k = len(p)
    return sum(pi * math.log(k * pi) for pi in p if pi > 0)


def max_chi_sq_divergence(n: int) -> float:
    """The chi-square divergence of all load on one of n ranks: n - 1."""
    return float(n - 1)


def max_kl_divergence(n: int) -> float:
    """The KL divergence of all load on one of n ranks: log n."""
    return math.log(n)
