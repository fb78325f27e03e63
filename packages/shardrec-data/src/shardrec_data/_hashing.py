"""Counter-based random numbers: every value is a pure function of (seed, sample, stream).

A sample of the synthetic dataset is generated from its index alone, so any subset of samples
(a rank's shard, a shuffled batch) costs O(batch) time and memory and is the same however it is
reached. The mixer is SplitMix64's finalizer, vectorized over uint64 arrays (wrap-around
multiplication is intended).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix(x: U64) -> U64:
    """SplitMix64's finalizer: a bijection of uint64 whose outputs look independent."""
    with np.errstate(over="ignore"):  # wrap-around is the point (NumPy warns on 0-d arrays)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def sample_keys(seed: int, indices: npt.NDArray[np.int64]) -> U64:
    """One key per sample: ``(B,)`` uint64 from the seed and the sample indices."""
    with np.errstate(over="ignore"):
        base = mix(np.array([seed], dtype=np.uint64) + _GOLDEN)
        return mix(indices.astype(np.uint64) * _GOLDEN + base)


def stream(keys: U64, stream_id: U64 | np.uint64 | int) -> U64:
    """Independent-looking uint64s for (key, stream) pairs (broadcasting)."""
    with np.errstate(over="ignore"):
        return mix(keys + (np.asarray(stream_id, dtype=np.uint64) + np.uint64(1)) * _M2)


def uniform(bits: U64) -> npt.NDArray[np.float64]:
    """Floats in ``[0, 1)`` from the top 53 bits."""
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def zipf_ids(
    u: npt.NDArray[np.float64], num_embeddings: npt.NDArray[np.int64] | int, alpha: float
) -> npt.NDArray[np.int64]:
    """Map uniforms ``u`` to ids in ``[0, num_embeddings)`` with P(id = k) ~ (k + 1) ** -alpha.

    ``num_embeddings`` is an int or an array broadcasting against ``u`` (one per table).

    The inverse CDF of the continuous power law on ``[1, n + 1)`` (density ~ x ** -alpha),
    floored: an O(1)-memory stand-in for the discrete Zipf law, exact for alpha = 0 (uniform)
    and within a few percent per id otherwise. Id 0 is the most frequent.
    """
    n = np.asarray(num_embeddings, dtype=np.float64)
    if alpha == 0.0:
        x = u * n
    elif alpha == 1.0:
        x = np.power(n + 1.0, u) - 1.0
    else:
        e = 1.0 - alpha
        x = np.power(1.0 + u * ((n + 1.0) ** e - 1.0), 1.0 / e) - 1.0
    ids = x.astype(np.int64)
    np.maximum(ids, 0, out=ids)
    return np.minimum(ids, np.asarray(num_embeddings, dtype=np.int64) - 1)


def zipf_cdf(
    k: npt.NDArray[np.float64], num_embeddings: int, alpha: float
) -> npt.NDArray[np.float64]:
    """P(id < k) under ``zipf_ids`` (for tests and docs)."""
    n = float(num_embeddings)
    if alpha == 0.0:
        return k / n
    if alpha == 1.0:
        out: npt.NDArray[np.float64] = np.log(k + 1.0) / np.log(n + 1.0)
        return out
    e = 1.0 - alpha
    out = ((k + 1.0) ** e - 1.0) / ((n + 1.0) ** e - 1.0)
    return out
