"""Bad and edge-case tables and weights for the trainable collections (issue 16, item 4).

- a table declared without features: it cannot exist; `feature_names=[]` means the feature
  named after the table (TorchRec's rule), and a KJT without that feature is refused by name;
- a collection without tables: accepted, as TorchRec accepts it (its test models build an
  unweighted-or-weighted EBC from an empty list); the output is empty;
- NaN per-sample weights: passed through (no check, no host sync): the bags holding them are
  NaN exactly as in `torch.nn.functional.embedding_bag`, the other bags are untouched.
"""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor


def _empty_kjt() -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=[], values=torch.zeros(0, dtype=torch.int64), lengths=torch.zeros(0, dtype=torch.int32)
    )


def _table(cls: type, name: str, features: list[str]) -> object:
    return cls(name=name, num_embeddings=4, embedding_dim=2, feature_names=features)


@pytest.mark.parametrize("kind", ["ebc", "ec", "fused-ebc"])
def test_a_table_declared_without_features_reads_the_feature_of_its_name(kind: str) -> None:
    cfg_type = EmbeddingConfig if kind == "ec" else EmbeddingBagConfig
    tables = [_table(cfg_type, "t0", ["f"]), _table(cfg_type, "lonely", [])]
    if kind == "ebc":
        module: torch.nn.Module = EmbeddingBagCollection(tables=tables)  # type: ignore[arg-type]
    elif kind == "ec":
        module = EmbeddingCollection(tables=tables)  # type: ignore[arg-type]
    else:
        module = FusedEmbeddingBagCollection(tables, "exact_sgd", {"lr": 0.1})  # type: ignore[arg-type]
    assert [t.feature_names for t in tables] == [["f"], ["lonely"]]  # type: ignore[attr-defined]
    only_f = KeyedJaggedTensor(keys=["f"], values=torch.tensor([1]), lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match="'lonely'"):
        module(only_f)
    both = KeyedJaggedTensor(
        keys=["f", "lonely"], values=torch.tensor([1, 3]), lengths=torch.tensor([1, 1])
    )
    module(both)  # reads it


def test_a_collection_without_tables_is_accepted_and_returns_nothing() -> None:
    ebc = EmbeddingBagCollection(tables=[])
    out = ebc(_empty_kjt())
    assert out.keys() == [] and out.values().shape[1] == 0
    assert EmbeddingCollection(tables=[])(_empty_kjt()) == {}
    assert list(ebc.parameters()) == []


def test_nan_per_sample_weights_pass_through_to_their_bag_only() -> None:
    gen = torch.Generator().manual_seed(7)
    cfg = EmbeddingBagConfig(name="t", num_embeddings=10, embedding_dim=3, feature_names=["f"])
    ebc = EmbeddingBagCollection(tables=[cfg], is_weighted=True)
    values = torch.randint(0, 10, (7,), generator=gen)
    lengths = torch.tensor([2, 0, 3, 2])
    weights = torch.rand(7, generator=gen)
    weights[3] = float("nan")  # the second id of the third bag
    kjt = KeyedJaggedTensor(keys=["f"], values=values, lengths=lengths, weights=weights)
    got = ebc(kjt).values()
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    want = torch.nn.functional.embedding_bag(
        values, ebc.embedding_bags["t"].weight, offsets[:-1], mode="sum", per_sample_weights=weights
    )
    assert torch.isnan(got[2]).all()
    assert torch.isfinite(got[[0, 1, 3]]).all()
    torch.testing.assert_close(got, want, equal_nan=True)
