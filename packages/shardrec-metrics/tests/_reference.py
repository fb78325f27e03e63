"""Naive references in plain Python floats: a pairwise AUC loop, NE, log loss and accuracy.

Nothing here shares code with shardrec_metrics; each formula is written from its definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

ETA = 1e-12


def naive_auc(p: Sequence[float], y: Sequence[float], w: Sequence[float]) -> float:
    """Weighted share of (positive, negative) pairs ranked right, ties one half. O(n^2)."""
    pos_w = sum(wi for yi, wi in zip(y, w, strict=True) if yi == 1)
    neg_w = sum(wi for yi, wi in zip(y, w, strict=True) if yi == 0)
    if pos_w + neg_w == 0:
        return math.nan
    if pos_w == 0 or neg_w == 0:
        return 0.5
    won = 0.0
    for pi, yi, wi in zip(p, y, w, strict=True):
        if yi != 1:
            continue
        for pj, yj, wj in zip(p, y, w, strict=True):
            if yj != 0:
                continue
            if pi > pj:
                won += wi * wj
            elif pi == pj:
                won += 0.5 * wi * wj
    return won / (pos_w * neg_w)


def _clamp(x: float) -> float:
    return min(max(x, ETA), 1.0 - ETA)


def naive_ne(p: Sequence[float], y: Sequence[float], w: Sequence[float]) -> float:
    """TorchRec's normalized entropy: CE in bits over the entropy of the clamped positive rate."""
    ce = 0.0
    pos = neg = 0.0
    for pi, yi, wi in zip(p, y, w, strict=True):
        q = _clamp(pi)
        ce += -wi * (yi * math.log2(q) + (1 - yi) * math.log2(1 - q))
        pos += wi * yi
        neg += wi * (1 - yi)
    total = pos + neg
    if total == 0:
        return math.nan
    rate = _clamp(pos / total)
    return ce / (-pos * math.log2(rate) - neg * math.log2(1 - rate))


def naive_log_loss(p: Sequence[float], y: Sequence[float], w: Sequence[float]) -> float:
    """Weighted mean BCE in nats."""
    ce = sum(
        -wi * (yi * math.log(_clamp(pi)) + (1 - yi) * math.log(1 - _clamp(pi)))
        for pi, yi, wi in zip(p, y, w, strict=True)
    )
    total = sum(w)
    return ce / total if total > 0 else math.nan


def naive_accuracy(
    p: Sequence[float], y: Sequence[float], w: Sequence[float], threshold: float = 0.5
) -> float:
    right = sum(wi for pi, yi, wi in zip(p, y, w, strict=True) if (pi >= threshold) == (yi == 1))
    total = sum(w)
    return right / total if total > 0 else math.nan
