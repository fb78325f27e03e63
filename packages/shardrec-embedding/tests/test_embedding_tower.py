"""EmbeddingTower(Collection): each tower gets the KJT its module reads; outputs concatenate."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    EmbeddingTower,
    EmbeddingTowerCollection,
    tower_input_params,
)
from shardrec_jagged import KeyedJaggedTensor


class _PoolValues(nn.Module):
    def forward(self, kt: object) -> torch.Tensor:
        return kt.values()  # type: ignore[attr-defined,no-any-return]  # a KeyedTensor


class _SumSequence(nn.Module):
    def forward(self, jts: dict) -> torch.Tensor:  # type: ignore[type-arg]  # name -> JT
        return torch.stack([jt.to_padded_dense().sum((1, 2)) for jt in jts.values()], dim=1)


def _kjt(weighted: bool) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=["f1", "f2"],
        values=torch.tensor([1, 2, 3, 0, 4]),
        lengths=torch.tensor([2, 1, 1, 1]),
        weights=torch.tensor([0.5, 1.0, 2.0, 1.0, 3.0]) if weighted else None,
    )


def test_collection_routes_inputs_and_concatenates() -> None:
    plain = EmbeddingBagCollection(
        [EmbeddingBagConfig(name="a", num_embeddings=5, embedding_dim=3, feature_names=["f1"])]
    )
    weighted = EmbeddingBagCollection(
        [EmbeddingBagConfig(name="b", num_embeddings=5, embedding_dim=2, feature_names=["f2"])],
        is_weighted=True,
    )
    seq = EmbeddingCollection(
        [EmbeddingConfig(name="c", num_embeddings=5, embedding_dim=2, feature_names=["f1"])]
    )
    assert [tower_input_params(m) for m in (plain, weighted, seq, nn.Identity())] == [
        (True, False),
        (False, True),
        (True, False),
        (True, True),
    ]
    towers = [
        EmbeddingTower(plain, _PoolValues()),
        EmbeddingTower(weighted, _PoolValues()),
        EmbeddingTower(seq, _SumSequence()),
    ]
    collection = EmbeddingTowerCollection(towers)
    features, weighted_features = _kjt(False), _kjt(True)
    out = collection(features, weighted_features)
    want = torch.cat(
        [
            plain(features).values(),
            weighted(weighted_features).values(),
            _SumSequence()(seq(features)),
        ],
        dim=1,
    )
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match=r"tower 1 reads \['weighted_features'\]"):
        collection(features)
