"""Jagged inputs at the lookup modules (issue 16 item 4): 2-D values are refused, naming the
shape; a values/weights buffer longer than the lengths use gives the same result as the exact one
(TorchRec accepts such buffers)."""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_jagged import KeyedJaggedTensor


def _ebc(weighted: bool = False) -> EmbeddingBagCollection:
    torch.manual_seed(0)
    tables = [
        EmbeddingBagConfig(name="t0", num_embeddings=10, embedding_dim=4, feature_names=["a"]),
        EmbeddingBagConfig(name="t1", num_embeddings=10, embedding_dim=3, feature_names=["b"]),
    ]
    return EmbeddingBagCollection(tables, is_weighted=weighted)


def _ec() -> EmbeddingCollection:
    torch.manual_seed(0)
    tables = [EmbeddingConfig(name="t0", num_embeddings=10, embedding_dim=4, feature_names=["a"])]
    return EmbeddingCollection(tables)


def test_two_dimensional_values_are_refused() -> None:
    # Each id a row of two: the pooled sum would silently add the wrong rows.
    kjt = KeyedJaggedTensor(
        ["a", "b"], torch.tensor([[1, 2], [3, 4]]), lengths=torch.tensor([1, 1])
    )
    with pytest.raises(ValueError, match=r"ids must be 1-D \(N,\), got .* shape \(2, 2\)"):
        _ebc()(kjt)
    one_key = KeyedJaggedTensor(["a"], torch.tensor([[1, 2]]), lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match=r"ids must be 1-D"):
        _ec()(one_key)


@pytest.mark.parametrize("weighted", [False, True])
def test_longer_values_buffer_pools_like_the_exact_one(weighted: bool) -> None:
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([2, 0, 1, 3, 1, 0])  # keys a, b; batch 3
    n = int(lengths.sum())
    values = torch.randint(0, 10, (n + 5,), generator=g)  # 5 unused trailing ids
    weights = torch.rand(n + 5, generator=g) if weighted else None
    ebc = _ebc(weighted)
    exact = KeyedJaggedTensor(
        ["a", "b"], values[:n], None if weights is None else weights[:n], lengths
    )
    longer = KeyedJaggedTensor(["a", "b"], values, weights, lengths)
    assert torch.equal(ebc(longer).values(), ebc(exact).values())


def test_longer_values_buffer_looks_up_like_the_exact_one() -> None:
    lengths = torch.tensor([2, 0, 1])
    values = torch.tensor([3, 1, 4, 9, 9])
    ec = _ec()
    exact = ec(KeyedJaggedTensor(["a"], values[:3], lengths=lengths))["a"]
    longer = ec(KeyedJaggedTensor(["a"], values, lengths=lengths))["a"]
    assert torch.equal(longer.values(), exact.values())
    assert torch.equal(longer.lengths(), exact.lengths())


# --- session 12 (s12-badinput): offsets that decrease inside one key --------------------------
# A KJT's first read checks its per-key bounds only; a decrease inside one key came out as a
# negative length: EmbeddingCollection returned rows for the wrong bags, and the torch path of
# EmbeddingBagCollection failed inside torch ("Expected i < index_size").


def _decreasing() -> KeyedJaggedTensor:
    # key "a": bags [0, 2) and [2, 1): offsets[2] = 1 < offsets[1] = 2
    return KeyedJaggedTensor.from_offsets_sync(
        keys=["a", "b"], values=torch.tensor([1, 2, 3, 4]), offsets=torch.tensor([0, 2, 1, 3, 4])
    )


def test_collection_refuses_offsets_that_decrease_inside_a_key() -> None:
    with pytest.raises(ValueError, match=r"offsets decrease at index 2 \(2 -> 1\).*'a' sample 1"):
        _ec()(_decreasing())


@pytest.mark.parametrize("native", [True, False])
def test_bag_collection_refuses_offsets_that_decrease_inside_a_key(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        monkeypatch.setattr(
            "shardrec_embedding.embedding_bag_collection.native_applies", lambda *a: False
        )
    with pytest.raises(ValueError, match=r"offsets decrease at index 2 \(2 -> 1\)"):
        _ebc()(_decreasing())


def test_increasing_offsets_still_look_up() -> None:
    kjt = KeyedJaggedTensor.from_offsets_sync(
        keys=["a"], values=torch.tensor([1, 2, 3]), offsets=torch.tensor([0, 2, 2, 3])
    )
    out = _ec()(kjt)["a"]
    assert out.lengths().tolist() == [2, 0, 1]
    assert out.values().shape == (3, 4)
