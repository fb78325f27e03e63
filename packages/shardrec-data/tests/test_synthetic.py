"""The synthetic dataset: determinism, shapes, Zipf skew, learnable labels, bad options."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _data_helpers import kjt_lists, samples

from shardrec_data import SyntheticConfig, load_dataset
from shardrec_data._hashing import zipf_cdf, zipf_ids


def test_default_is_criteo_shaped() -> None:
    ds = load_dataset("synthetic")
    assert ds.num_dense == 13
    assert [f.name for f in ds.sparse_features] == [f"cat_{i}" for i in range(26)]
    assert all(f.num_embeddings == 100_000 and not f.multi_hot for f in ds.sparse_features)
    b = next(ds.batches("train", 16))
    assert b.dense_features.shape == (16, 13) and b.dense_features.dtype == torch.float32
    assert b.labels.shape == (16,) and b.labels.dtype == torch.float32
    assert set(b.labels.tolist()) <= {0.0, 1.0}
    assert b.sparse_features.keys() == ds.feature_names
    assert b.sparse_features.stride() == 16
    assert b.sparse_features.lengths().tolist() == [1] * (16 * 26)


def test_a_sample_depends_only_on_seed_split_and_index() -> None:
    ds = load_dataset("synthetic", num_sparse=4, ids_per_bag=(0, 3), num_samples=30, seed=5)
    whole = samples(ds.take("train", np.arange(30)))
    idx = np.array([29, 3, 3, 17, 0])
    assert samples(ds.take("train", idx)) == [whole[i] for i in idx]
    again = load_dataset("synthetic", num_sparse=4, ids_per_bag=(0, 3), num_samples=30, seed=5)
    assert samples(again.take("train", np.arange(30))) == whole
    other = load_dataset("synthetic", num_sparse=4, ids_per_bag=(0, 3), num_samples=30, seed=6)
    assert samples(other.take("train", np.arange(30))) != whole
    test_split = samples(ds.take("test", np.arange(30)))
    assert test_split != whole  # the test split holds other samples


@pytest.mark.parametrize("ids_per_bag", [1, 3, (0, 4), (2, 2), (1, 5)])
def test_bag_sizes_and_id_ranges(ids_per_bag: int | tuple[int, int]) -> None:
    sizes = [7, 100, 1, 3000]
    ds = load_dataset(
        "synthetic", num_embeddings=sizes, ids_per_bag=ids_per_bag, alpha=0.8, num_samples=200
    )
    lo, hi = (ids_per_bag, ids_per_bag) if isinstance(ids_per_bag, int) else ids_per_bag
    assert [f.multi_hot for f in ds.sparse_features] == [not (lo == hi == 1)] * 4
    lists = kjt_lists(next(ds.batches("train", 200)))
    for feat, n in zip(ds.sparse_features, sizes, strict=True):
        bags = lists[feat.name]
        assert all(lo <= len(bag) <= hi for bag in bags)
        assert all(0 <= i < n for bag in bags for i in bag)
    if lo < hi:
        assert len({len(bag) for bag in lists["cat_1"]}) > 1


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 1.3])
def test_zipf_ids_follow_their_cdf(alpha: float) -> None:
    n = 1000
    u = np.random.default_rng(0).random(200_000)
    ids = zipf_ids(u, n, alpha)
    assert ids.min() >= 0 and ids.max() <= n - 1
    for k in (1, 10, 100, 500):
        assert abs((ids < k).mean() - zipf_cdf(np.array(float(k)), n, alpha)) < 0.01


def test_skew_makes_low_ids_hot() -> None:
    ds = load_dataset("synthetic", num_sparse=1, num_embeddings=10_000, alpha=1.2, num_samples=5000)
    ids = next(ds.batches("train", 5000)).sparse_features.values().numpy()
    assert (ids == 0).mean() > 0.1
    flat = load_dataset("synthetic", num_sparse=1, num_embeddings=10_000, num_samples=5000)
    ids0 = next(flat.batches("train", 5000)).sparse_features.values().numpy()
    assert (ids0 == 0).mean() < 0.01
    assert np.unique(ids0).size > 3000


def test_labels_follow_the_hidden_rule() -> None:
    ds = load_dataset("synthetic", num_sparse=3, num_embeddings=16, num_samples=20_000, num_dense=4)
    b = next(ds.batches("train", 20_000))
    y = b.labels.numpy()
    assert 0.3 < y.mean() < 0.7
    d = b.dense_features.numpy()
    for k, sign in enumerate([1, -1, 1, -1]):
        corr = np.corrcoef(d[:, k], y)[0, 1]
        assert corr * sign > 0.15
    # Each id of the first tables carries a fixed +-1: per-id label rates fall in two groups
    # (16 ids all drawing the same sign has probability 2 ** -15).
    first = b.sparse_features.values().numpy()[:20_000]
    rates = np.sort([y[first == i].mean() for i in range(16)])
    gap = np.diff(rates).argmax()
    assert rates[gap + 1] - rates[gap] > 0.1
    assert rates[gap] - rates[0] < 0.08 and rates[-1] - rates[gap + 1] < 0.08


def test_batch_to_and_len() -> None:
    ds = load_dataset("synthetic", num_sparse=2, num_embeddings=10, num_samples=5)
    b = next(ds.batches("train", 5))
    moved = b.to("cpu")
    assert len(moved) == 5
    assert torch.equal(moved.dense_features, b.dense_features)
    assert torch.equal(moved.sparse_features.values(), b.sparse_features.values())


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"num_embeddings": 0}, ValueError, "num_embeddings must be >= 1, got 0"),
        ({"num_embeddings": []}, ValueError, "at least one table"),
        ({"ids_per_bag": 0}, ValueError, "ids_per_bag must be >= 1, got 0"),
        ({"ids_per_bag": (3, 1)}, ValueError, r"ids_per_bag\[1\] must be >= 3, got 1"),
        ({"ids_per_bag": (1, 2, 3)}, ValueError, r"\(1, 2, 3\)"),
        ({"alpha": -0.5}, ValueError, "alpha must be a number >= 0, got -0.5"),
        ({"num_dense": 0}, ValueError, "num_dense must be >= 1, got 0"),
        ({"num_samples": 1.5}, TypeError, "num_samples must be an int, got 1.5"),
        ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
    ],
)
def test_bad_options(options: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        load_dataset("synthetic", **options)


def test_config_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        SyntheticConfig(10)  # type: ignore[misc]
