"""load_dataset: names, options, and the interface every dataset shares."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardrec_data import DATASET_NAMES, Batch, RecDataset, SparseFeature, load_dataset


def test_names() -> None:
    assert DATASET_NAMES == ("movielens-100k", "criteo-tsv", "criteo-npy", "synthetic")


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'criteo'") as err:
        load_dataset("criteo")
    for name in DATASET_NAMES:
        assert name in str(err.value)


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"no option 'batch_size'.*valid options: num_embeddings"):
        load_dataset("synthetic", batch_size=3)
    with pytest.raises(ValueError, match=r"no option 'path'.*paths, data_dir"):
        load_dataset("criteo-tsv", path="x.tsv")


def test_sparse_feature_checks() -> None:
    with pytest.raises(ValueError, match="'user': num_embeddings must be >= 1, got 0"):
        SparseFeature("user", 0)
    assert SparseFeature("genres", 19, multi_hot=True).multi_hot


def test_dataset_is_a_rec_dataset_with_a_readable_repr() -> None:
    ds = load_dataset("synthetic", num_sparse=2, num_embeddings=[5, 6], num_samples=9)
    assert isinstance(ds, RecDataset)
    assert repr(ds) == (
        "SyntheticDataset(synthetic: train=9, test=100000; dense=13; cat_0[5], cat_1[6])"
    )


def test_batch_is_frozen_and_moves() -> None:
    b = next(
        load_dataset("synthetic", num_sparse=1, num_embeddings=3, num_samples=4).batches("train", 4)
    )
    assert isinstance(b, Batch) and len(b) == 4
    with pytest.raises(AttributeError):
        b.labels = torch.zeros(4)  # type: ignore[misc]
    moved = b.to(torch.device("cpu"), non_blocking=True)
    assert torch.equal(moved.labels, b.labels)
    assert moved.sparse_features.keys() == ["cat_0"]


def test_sequence_options_accept_command_line_text(tmp_path) -> None:
    ds = load_dataset("synthetic", num_embeddings="10,20", ids_per_bag="0,3", num_samples=4)
    assert [f.num_embeddings for f in ds.sparse_features] == [10, 20]
    assert all(f.multi_hot for f in ds.sparse_features)
    with pytest.raises(ValueError, match="comma-separated ints such as '1,5', got 'a,b'"):
        load_dataset("synthetic", num_embeddings="a,b")
    with pytest.raises(ValueError, match="got '1,x'"):
        load_dataset("criteo-npy", data_dir=tmp_path, days="1,x")


@pytest.mark.parametrize("name", ["synthetic", "criteo-tsv"])
def test_take_checks_indices(name: str, tmp_path) -> None:
    if name == "synthetic":
        ds = load_dataset(name, num_sparse=1, num_embeddings=3, num_samples=4)
    else:
        line = "\t".join(["1"] + [""] * 39)
        (tmp_path / "a.tsv").write_text((line + "\n") * 5)
        ds = load_dataset(name, paths=tmp_path / "a.tsv")
    n = ds.num_samples("train")
    with pytest.raises(IndexError, match=f"sample index {n} is out of range for split 'train'"):
        ds.take("train", np.array([0, n]))
    with pytest.raises(IndexError, match="sample index -1"):
        ds.take("train", np.array([-1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pin_memory_and_cuda_copy() -> None:
    ds = load_dataset(
        "synthetic", num_sparse=2, num_embeddings=9, ids_per_bag=(0, 2), num_samples=8
    )
    b = next(ds.batches("train", 8))
    pinned = b.pin_memory()
    assert pinned.dense_features.is_pinned() and pinned.labels.is_pinned()
    on_gpu = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert on_gpu.sparse_features.values().is_cuda
    assert torch.equal(on_gpu.sparse_features.values().cpu(), b.sparse_features.values())
    assert torch.equal(on_gpu.labels.cpu(), b.labels)
