"""RecDataset: the interface every dataset implements, and the rank sharding rule.

A split of n samples is served to ``world_size`` ranks like this (n = 10, world_size = 3,
batch_size = 2)::

    order (shuffled with (seed, epoch), the same on every rank):  7 2 9 0 4 1 8 5 3 6
    shards of n // world_size = 3 contiguous samples:            [7 2 9][0 4 1][8 5 3]  (6 dropped)
    rank 1's batches:                                             [0 4] [1]

Every rank yields ``ceil((n // world_size) / batch_size)`` batches with the same sizes in the
same order (only the last may be smaller, on every rank alike). Collectives run in lockstep, so
equal batch counts are what keeps ranks from waiting on each other forever. At most
``world_size - 1`` samples of a split are dropped per epoch; with ``shuffle=True`` the dropped
samples change from epoch to epoch.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from shardrec_data.batch import Batch

__all__ = ["SPLITS", "ReadOrder", "RecDataset", "SparseFeature", "shard_indices"]

SPLITS = ("train", "test")


@dataclass(frozen=True)
class SparseFeature:
    """One sparse (categorical) feature of a dataset.

    Attributes:
        name: the KeyedJaggedTensor key.
        num_embeddings: ids are in ``[0, num_embeddings)``; with ``raw_ids``, a size hint
            (the distinct ids the data holds, or a bound on them) for a raw-id table's capacity.
        multi_hot: True when a sample may carry 0 or several ids (e.g. a movie's genres).
        raw_ids: the ids are raw int64 values as the source spells them (any value, not
            re-indexed): read them with a dynamic table (docs/dynamic.md).
    """

    name: str
    num_embeddings: int
    multi_hot: bool = False
    raw_ids: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("SparseFeature.name must be a non-empty string")
        if self.num_embeddings < 1:
            raise ValueError(
                f"SparseFeature {self.name!r}: num_embeddings must be >= 1, "
                f"got {self.num_embeddings}"
            )


def int_list_option(name: str, value: object) -> object:
    """A command-line string ``"3,5"`` as ``(3, 5)``; any other value unchanged.

    Options reach ``load_dataset`` as text from ``--dataset-option KEY=VALUE``; sequence-valued
    options accept comma-separated integers there.
    """
    if not isinstance(value, str):
        return value
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise ValueError(
            f"{name} must be an int or comma-separated ints such as '1,5', got {value!r}"
        ) from None


def check_indices(split: str, indices: npt.NDArray[np.int64], num_samples: int) -> None:
    """IndexError naming the first index outside ``[0, num_samples)``."""
    if indices.ndim != 1:
        raise ValueError(f"indices must be one-dimensional, got shape {indices.shape}")
    if indices.size and (indices.min() < 0 or indices.max() >= num_samples):
        bad = int(indices[(indices < 0) | (indices >= num_samples)][0])
        raise IndexError(
            f"sample index {bad} is out of range for split {split!r} with {num_samples} samples"
        )


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def _check_int(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_rank(rank: int, world_size: int) -> None:
    _check_int("world_size", world_size, 1)
    _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(
            f"rank {rank} is outside [0, world_size) = [0, {world_size}); "
            "pass the process's rank, from 0 to world_size - 1"
        )


class ReadOrder(TypedDict, total=False):
    """Which samples a rank reads, in which order: the keyword arguments of ``shard_indices``
    after ``num_samples`` (defaults there), which ``RecDataset.batches`` passes on."""

    rank: int
    world_size: int
    shuffle: bool
    seed: int
    epoch: int


def shard_indices(
    num_samples: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
) -> npt.NDArray[np.int64]:
    """The sample indices (into a split) that ``rank`` reads, in reading order.

    The order is ``arange(num_samples)``, or with ``shuffle`` a permutation drawn from
    ``(seed, epoch)`` (identical on every rank); rank r takes the r-th of ``world_size``
    contiguous pieces of ``num_samples // world_size`` samples.

    Returns: ``(num_samples // world_size,)`` int64.
    """
    _check_int("num_samples", num_samples, 0)
    _check_rank(rank, world_size)
    _check_int("seed", seed, 0)
    _check_int("epoch", epoch, 0)
    per_rank = num_samples // world_size
    start = rank * per_rank
    if not shuffle:
        return np.arange(start, start + per_rank, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    order = rng.permutation(num_samples).astype(np.int64, copy=False)
    return order[start : start + per_rank]


class RecDataset(abc.ABC):
    """A recommendation dataset with a ``train`` and a ``test`` split.

    Subclasses set ``name``, ``num_dense`` and ``sparse_features`` and implement
    ``num_samples`` and ``take``; batching and rank sharding are shared (module docstring).
    """

    name: str
    num_dense: int
    sparse_features: tuple[SparseFeature, ...]

    @abc.abstractmethod
    def num_samples(self, split: str) -> int:
        """Samples in ``split`` ("train" or "test")."""

    @abc.abstractmethod
    def take(self, split: str, indices: npt.NDArray[np.int64]) -> Batch:
        """The samples of ``split`` at ``indices`` (``(B,)``, each in ``[0, num_samples)``)."""

    @property
    def feature_names(self) -> list[str]:
        """The sparse feature names, in KeyedJaggedTensor key order."""
        return [f.name for f in self.sparse_features]

    def num_batches(self, split: str, batch_size: int, world_size: int = 1) -> int:
        """Batches each rank yields from ``split`` per epoch (the same on every rank)."""
        check_split(split)
        _check_int("batch_size", batch_size, 1)
        _check_int("world_size", world_size, 1)
        per_rank = self.num_samples(split) // world_size
        return -(-per_rank // batch_size)

    def batches(self, split: str, batch_size: int, **order: Unpack[ReadOrder]) -> Iterator[Batch]:
        """One epoch of ``rank``'s batches of ``split`` (sharding rule: module docstring).

        ``order``: ``rank=0, world_size=1, shuffle=False, seed=0, epoch=0`` (``ReadOrder``, as
        for ``shard_indices``). Arguments are checked when this is called, not when the iterator
        is first advanced.
        """
        check_split(split)
        _check_int("batch_size", batch_size, 1)
        indices = shard_indices(self.num_samples(split), **order)
        return self._iterate(split, indices, batch_size)

    def _iterate(
        self, split: str, indices: npt.NDArray[np.int64], batch_size: int
    ) -> Iterator[Batch]:
        for start in range(0, indices.size, batch_size):
            yield self.take(split, indices[start : start + batch_size])

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.num_samples(s)}" for s in SPLITS)
        feats = ", ".join(
            f"{f.name}[{f.num_embeddings}{', multi' if f.multi_hot else ''}]"
            for f in self.sparse_features
        )
        return f"{type(self).__name__}({self.name}: {sizes}; dense={self.num_dense}; {feats})"
