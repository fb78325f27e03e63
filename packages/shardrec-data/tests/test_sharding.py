"""The rank sharding rule, on the shared RecDataset.batches, against a naive reference."""

from __future__ import annotations

import numpy as np
import pytest
from _data_helpers import samples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_data import load_dataset, shard_indices


def _naive_order(n: int, shuffle: bool, seed: int, epoch: int) -> list[int]:
    if not shuffle:
        return list(range(n))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return rng.permutation(n).tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 60),
    world_size=st.integers(1, 7),
    shuffle=st.booleans(),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
)
def test_shards_are_disjoint_equal_and_cover_the_split_minus_the_tail(
    n: int, world_size: int, shuffle: bool, seed: int, epoch: int
) -> None:
    order = _naive_order(n, shuffle, seed, epoch)
    shards = [
        shard_indices(n, rank=r, world_size=world_size, shuffle=shuffle, seed=seed, epoch=epoch)
        for r in range(world_size)
    ]
    per = n // world_size
    assert all(s.size == per for s in shards)
    union = np.concatenate(shards).tolist()
    assert len(set(union)) == len(union)  # disjoint
    assert union == order[: per * world_size]  # contiguous pieces of the shared order
    assert n - len(union) < world_size  # at most world_size - 1 dropped


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize("batch_size", [1, 4, 7, 100])
def test_every_rank_yields_the_same_batch_sizes(world_size: int, batch_size: int) -> None:
    ds = load_dataset("synthetic", num_sparse=2, num_embeddings=50, num_samples=53, num_dense=2)
    sizes = []
    seen: list[float] = []
    for rank in range(world_size):
        batches = list(
            ds.batches("train", batch_size, rank=rank, world_size=world_size, shuffle=True, seed=3)
        )
        assert len(batches) == ds.num_batches("train", batch_size, world_size)
        sizes.append([len(b) for b in batches])
        seen += [s[0][0] for b in batches for s in samples(b)]
    assert all(s == sizes[0] for s in sizes)
    assert sum(sizes[0]) == 53 // world_size
    assert all(x == batch_size for x in sizes[0][:-1])
    # Shards hold distinct samples (dense_0 identifies a synthetic sample here).
    assert len(set(seen)) == len(seen) == (53 // world_size) * world_size


def test_shuffle_changes_per_epoch_and_is_deterministic() -> None:
    ds = load_dataset("synthetic", num_sparse=3, num_embeddings=1000, num_samples=40)

    def epoch_labels(epoch: int, seed: int = 0) -> list[list[float]]:
        return [
            b.dense_features[:, 0].tolist()
            for b in ds.batches("train", 8, shuffle=True, seed=seed, epoch=epoch)
        ]

    assert epoch_labels(0) == epoch_labels(0)
    assert epoch_labels(0) != epoch_labels(1)
    assert epoch_labels(0, seed=1) != epoch_labels(0, seed=0)
    assert sorted(np.concatenate(epoch_labels(0))) == sorted(np.concatenate(epoch_labels(1)))
    unshuffled = [b.dense_features[:, 0].tolist() for b in ds.batches("train", 8)]
    assert unshuffled != epoch_labels(0)


def test_fewer_samples_than_ranks_gives_no_batches() -> None:
    ds = load_dataset("synthetic", num_sparse=1, num_embeddings=5, num_samples=2)
    assert ds.num_batches("train", 4, world_size=3) == 0
    assert list(ds.batches("train", 4, rank=2, world_size=3)) == []


@pytest.mark.parametrize("batch_size", [0, -3])
def test_batch_size_must_be_positive(batch_size: int) -> None:
    ds = load_dataset("synthetic", num_samples=10)
    with pytest.raises(ValueError, match=rf"batch_size must be >= 1, got {batch_size}"):
        ds.batches("train", batch_size)
    with pytest.raises(ValueError, match=rf"batch_size must be >= 1, got {batch_size}"):
        ds.num_batches("train", batch_size)


@pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (5, 3), (-1, 2)])
def test_rank_must_be_inside_the_world(rank: int, world_size: int) -> None:
    ds = load_dataset("synthetic", num_samples=10)
    with pytest.raises(ValueError, match=rf"rank {rank}|rank must be >= 0, got {rank}"):
        ds.batches("train", 2, rank=rank, world_size=world_size)


def test_world_size_and_split_checked() -> None:
    ds = load_dataset("synthetic", num_samples=10)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        ds.batches("train", 2, world_size=0)
    with pytest.raises(ValueError, match="'valid'"):
        ds.batches("valid", 2)
    with pytest.raises(TypeError, match=r"batch_size must be an int, got 2\.5"):
        ds.batches("train", 2.5)  # type: ignore[arg-type]
