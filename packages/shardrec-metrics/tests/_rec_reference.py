"""Naive per-sample references for the TorchRec-API metrics, in Python floats.

Nothing here shares code with shardrec_metrics: each metric is written from TorchRec's
documented formula, and the window is rebuilt by walking the batches backwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

ETA = 1e-12
Sample = tuple[float, float, float]  # prediction, label, weight
Batch = list[Sample]


def window_batches(batches: Sequence[Batch], local_window: int) -> list[Batch]:
    """The most recent whole batches whose sample count stays within `local_window`."""
    kept: list[Batch] = []
    held = 0
    for batch in reversed(batches):
        if held + len(batch) > local_window:
            break
        kept.insert(0, batch)
        held += len(batch)
    return kept


def window_samples(batches: Sequence[Batch], local_window: int) -> list[Sample]:
    """The last `local_window` samples, to the sample (the AUC window)."""
    flat = [s for b in batches for s in b]
    return flat[-local_window:]


def _clamp(x: float) -> float:
    return min(max(x, ETA), 1.0 - ETA)


def ne(samples: Sequence[Sample]) -> float:
    ce = sum(
        -w * (y * math.log2(_clamp(p)) + (1 - y) * math.log2(1 - _clamp(p))) for p, y, w in samples
    )
    pos = sum(w * y for _, y, w in samples)
    neg = sum(w * (1 - y) for _, y, w in samples)
    total = max(sum(w for _, _, w in samples), ETA)
    r = _clamp(pos / total)
    return ce / (-pos * math.log2(r) - neg * math.log2(1 - r))


def logloss(samples: Sequence[Sample]) -> float:
    ce = sum(
        -w * (y * math.log2(_clamp(p)) + (1 - y) * math.log2(1 - _clamp(p))) for p, y, w in samples
    )
    return ce / max(sum(w for _, _, w in samples), ETA)


def _ratio(num: float, den: float) -> float:
    return 0.0 if den == 0 else num / den


def calibration(samples: Sequence[Sample]) -> float:
    den = sum(w * y for _, y, w in samples)
    return 0.0 if den <= 0 else sum(w * p for p, _, w in samples) / den


def ctr(samples: Sequence[Sample]) -> float:
    return _ratio(sum(w * y for _, y, w in samples), sum(w for _, _, w in samples))


def mse(samples: Sequence[Sample]) -> float:
    return _ratio(sum(w * (y - p) ** 2 for p, y, w in samples), sum(w for _, _, w in samples))


def rmse(samples: Sequence[Sample]) -> float:
    return math.sqrt(mse(samples))


def mae(samples: Sequence[Sample]) -> float:
    return _ratio(sum(w * abs(y - p) for p, y, w in samples), sum(w for _, _, w in samples))


def accuracy(samples: Sequence[Sample], threshold: float = 0.5) -> float:
    hits = sum(w for p, y, w in samples if (1.0 if p >= threshold else 0.0) == y)
    return _ratio(hits, sum(w for _, _, w in samples))


def precision(samples: Sequence[Sample], threshold: float = 0.5) -> float:
    tp = sum(w * y for p, y, w in samples if p >= threshold)
    fp = sum(w * (1 - y) for p, y, w in samples if p >= threshold)
    return _ratio(tp, tp + fp)


def recall(samples: Sequence[Sample], threshold: float = 0.5) -> float:
    tp = sum(w * y for p, y, w in samples if p >= threshold)
    fn = sum(w * y for p, y, w in samples if p <= threshold)
    return _ratio(tp, tp + fn)


def weighted_avg(samples: Sequence[Sample]) -> float:
    return sum(w * p for p, _, w in samples) / sum(w for _, _, w in samples)


def auc(samples: Sequence[Sample]) -> float:
    """Weighted share of (positive, negative) pairs ranked right, ties 1/2; 0.5 without both."""
    pos = [(p, w) for p, y, w in samples if y == 1]
    neg = [(p, w) for p, y, w in samples if y == 0]
    pw, nw = sum(w for _, w in pos), sum(w for _, w in neg)
    if pw == 0 or nw == 0:
        return 0.5
    won = sum(
        wi * wj * (1.0 if pi > pj else 0.5 if pi == pj else 0.0) for pi, wi in pos for pj, wj in neg
    )
    return won / (pw * nw)


def auprc(samples: Sequence[Sample]) -> float:
    """Sum over distinct thresholds (descending) of precision * recall gained."""
    if not samples:
        return 0.0
    total_pos = sum(w * y for _, y, w in samples)
    area, last_recall = 0.0, 0.0
    for t in sorted({p for p, _, _ in samples}, reverse=True):
        tp = sum(w * y for p, y, w in samples if p >= t)
        fp = sum(w * (1 - y) for p, y, w in samples if p >= t)
        r = tp / total_pos if total_pos else 0.0
        prec = tp / (tp + fp) if tp + fp else 1.0
        area += (r - last_recall) * prec
        last_recall = r
    return area


def sum_weights(samples: Sequence[Sample]) -> float:
    return sum(w for _, _, w in samples)


def num_positive_samples(samples: Sequence[Sample]) -> float:
    return sum(w * y for _, y, w in samples)


def weighted_sum_predictions(samples: Sequence[Sample]) -> float:
    return sum(w * p for p, _, w in samples)


SUM_METRICS: dict[str, Callable[[Sequence[Sample]], float]] = {
    "ne": ne,
    "calibration": calibration,
    "ctr": ctr,
    "mse": mse,
    "mae": mae,
    "accuracy": accuracy,
    "precision": precision,
    "recall": recall,
    "weighted_avg": weighted_avg,
    "sum_weights": sum_weights,
    "num_positive_samples": num_positive_samples,
    "weighted_sum_predictions": weighted_sum_predictions,
}
