"""Synthetic Criteo-shaped data: configurable tables, bag sizes and Zipf skew, learnable labels.

Every sample is a pure function of ``(seed, split, index)`` (counter-based hashing, see
``_hashing``): nothing is stored, a batch of B samples costs O(B * ids) vectorized NumPy work,
and the same index always gives the same sample, on any rank and in any order.

Labels follow a hidden logistic rule, so a model can learn them::

    logit = 4 * sum_{d < min(4, D)} s_d * (dense_d - 0.5)          s = (+1, -1, +1, -1)
          + sum_{f < min(3, F)} sign_f(first id of feature f)       sign_f(id) = +-1, fixed per id
    label = 1 with probability sigmoid(logit)

The dense part is learnable by any model; the sparse part only for ids seen often enough, so
it shows with a Zipf skew (``alpha`` > 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from shardrec_data import _hashing as h
from shardrec_data.batch import Batch
from shardrec_data.dataset import (
    RecDataset,
    SparseFeature,
    check_indices,
    check_split,
    int_list_option,
)
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["SyntheticConfig", "SyntheticDataset"]

_MAX_IDS_PER_BAG = 1 << 20
_LEN_STREAM = 1 << 40
_DENSE_STREAM = 1 << 41
_LABEL_STREAM = 1 << 42
_SIGN_STREAM = 1 << 43
_DENSE_SIGNS = np.array([1.0, -1.0, 1.0, -1.0])


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"synthetic: {name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"synthetic: {name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True, kw_only=True)
class SyntheticConfig:
    """Options of the ``synthetic`` dataset.

    Attributes:
        num_embeddings: rows per table: one int for every feature, or one per feature.
        num_sparse: number of sparse features when ``num_embeddings`` is one int.
        ids_per_bag: ids per sample and feature: an int, or an inclusive range ``(lo, hi)``
            drawn uniformly per bag (``lo`` may be 0: empty bags).
        alpha: Zipf exponent; P(id = k) ~ (k + 1) ** -alpha, 0 = uniform. Id 0 is the hottest.
        num_dense: dense features (>= 1).
        num_samples: samples in the train split.
        num_test_samples: samples in the test split (distinct from the train samples).
        seed: the data seed (the shuffle seed is separate, an argument of ``batches``).
    """

    num_embeddings: int | Sequence[int] = 100_000
    num_sparse: int = 26
    ids_per_bag: int | Sequence[int] = 1
    alpha: float = 0.0
    num_dense: int = 13
    num_samples: int = 1_000_000
    num_test_samples: int = 100_000
    seed: int = 0
    table_sizes: tuple[int, ...] = field(init=False)
    bag_range: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        for name in ("num_embeddings", "ids_per_bag"):
            value = int_list_option(f"synthetic: {name}", getattr(self, name))
            if isinstance(value, tuple) and len(value) == 1 and name == "num_embeddings":
                value = value[0]
            object.__setattr__(self, name, value)
        if isinstance(self.num_embeddings, Sequence):
            sizes = tuple(_int("num_embeddings[i]", n, 1) for n in self.num_embeddings)
            if not sizes:
                raise ValueError("synthetic: num_embeddings must list at least one table")
        else:
            n = _int("num_embeddings", self.num_embeddings, 1)
            sizes = (n,) * _int("num_sparse", self.num_sparse, 1)
        if isinstance(self.ids_per_bag, Sequence):
            if len(self.ids_per_bag) != 2:
                raise ValueError(
                    f"synthetic: ids_per_bag must be an int or a range (lo, hi), "
                    f"got {self.ids_per_bag!r}"
                )
            lo = _int("ids_per_bag[0]", self.ids_per_bag[0], 0)
            hi = _int("ids_per_bag[1]", self.ids_per_bag[1], lo)
        else:
            lo = hi = _int("ids_per_bag", self.ids_per_bag, 1)
        if hi > _MAX_IDS_PER_BAG:
            raise ValueError(f"synthetic: ids_per_bag may be at most {_MAX_IDS_PER_BAG}, got {hi}")
        if not isinstance(self.alpha, int | float) or not self.alpha >= 0.0:
            raise ValueError(f"synthetic: alpha must be a number >= 0, got {self.alpha!r}")
        _int("num_dense", self.num_dense, 1)
        _int("num_samples", self.num_samples, 0)
        _int("num_test_samples", self.num_test_samples, 0)
        _int("seed", self.seed, 0)
        object.__setattr__(self, "table_sizes", sizes)
        object.__setattr__(self, "bag_range", (lo, hi))


class SyntheticDataset(RecDataset):
    """The ``synthetic`` dataset (module docstring). Features are named ``cat_0``, ``cat_1``..."""

    def __init__(self, config: SyntheticConfig) -> None:
        self.config = config
        self.name = "synthetic"
        self.num_dense = config.num_dense
        lo, hi = config.bag_range
        multi = not (lo == hi == 1)
        self.sparse_features = tuple(
            SparseFeature(f"cat_{i}", n, multi) for i, n in enumerate(config.table_sizes)
        )
        self._sizes = np.array(config.table_sizes, dtype=np.int64)

    def num_samples(self, split: str) -> int:
        check_split(split)
        return self.config.num_samples if split == "train" else self.config.num_test_samples

    def take(self, split: str, indices: npt.NDArray[np.int64]) -> Batch:
        check_split(split)
        indices = np.asarray(indices, dtype=np.int64)
        check_indices(split, indices, self.num_samples(split))
        cfg = self.config
        b = int(indices.size)
        f = len(cfg.table_sizes)
        offset = 0 if split == "train" else cfg.num_samples
        keys = h.sample_keys(cfg.seed, np.asarray(indices, dtype=np.int64) + offset)  # (B,)
        lo, hi = cfg.bag_range
        feats = np.arange(f, dtype=np.uint64)

        if lo == hi:
            lengths = np.full(f * b, lo, dtype=np.int64)
            pos = np.arange(lo, dtype=np.uint64)
            streams = feats[:, None, None] * np.uint64(_MAX_IDS_PER_BAG) + pos  # (F, 1, L)
            bits = h.stream(keys[None, :, None], streams)  # (F, B, L)
            sizes = self._sizes[:, None, None]
            values = h.zipf_ids(h.uniform(bits), sizes, cfg.alpha).reshape(-1)
        else:
            u_len = h.uniform(h.stream(keys[None, :], feats[:, None] + np.uint64(_LEN_STREAM)))
            lengths = (lo + (u_len * (hi - lo + 1)).astype(np.int64)).reshape(-1)  # (F * B,)
            total = int(lengths.sum())
            bag = np.repeat(np.arange(f * b, dtype=np.int64), lengths)
            starts = np.cumsum(lengths) - lengths
            j = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
            feat_of = bag // b
            streams = feat_of.astype(np.uint64) * np.uint64(_MAX_IDS_PER_BAG) + j.astype(np.uint64)
            bits = h.stream(keys[bag % b], streams)
            values = h.zipf_ids(h.uniform(bits), self._sizes[feat_of], cfg.alpha)

        dense_bits = h.stream(
            keys[:, None], np.arange(cfg.num_dense, dtype=np.uint64) + np.uint64(_DENSE_STREAM)
        )
        dense = h.uniform(dense_bits).astype(np.float32)  # (B, D)
        labels = self._labels(keys, dense, values, lengths, b)
        kjt = KeyedJaggedTensor(
            keys=self.feature_names,
            values=torch.from_numpy(values),
            lengths=torch.from_numpy(lengths),
            stride=b,
        )
        return Batch(
            dense_features=torch.from_numpy(dense),
            sparse_features=kjt,
            labels=torch.from_numpy(labels),
        )

    def _labels(
        self,
        keys: h.U64,
        dense: npt.NDArray[np.float32],
        values: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        b: int,
    ) -> npt.NDArray[np.float32]:
        nd = min(4, dense.shape[1])
        logit = 4.0 * ((dense[:, :nd].astype(np.float64) - 0.5) @ _DENSE_SIGNS[:nd])
        starts = np.cumsum(lengths) - lengths
        seed_key = np.uint64(self.config.seed) + np.uint64(_SIGN_STREAM)
        for feat in range(min(3, len(self.sparse_features))):
            lens = lengths[feat * b : (feat + 1) * b]
            has = lens > 0
            first = values[starts[feat * b : (feat + 1) * b][has]]
            bits = h.stream(first.astype(np.uint64) + seed_key, np.uint64(feat))
            signs = np.where((bits >> np.uint64(63)) == 1, 1.0, -1.0)
            logit[has] += signs
        prob = 1.0 / (1.0 + np.exp(-logit))
        u = h.uniform(h.stream(keys, np.uint64(_LABEL_STREAM)))
        labels: npt.NDArray[np.float32] = (u < prob).astype(np.float32)
        return labels
