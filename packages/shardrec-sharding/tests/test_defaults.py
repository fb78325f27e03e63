"""get_default_sharders / get_module_to_default_sharders / apply_to_all (TorchRec's helpers)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    FusedEmbeddingBagCollection,
)
from shardrec_planner import construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding import (
    EmbeddingBagCollectionSharder,
    EmbeddingCollectionSharder,
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
    apply_to_all,
    get_default_sharders,
    get_module_to_default_sharders,
)


def ebc() -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name=f"t{i}", embedding_dim=4, num_embeddings=5 + i, feature_names=[f"f{i}"]
            )
            for i in range(3)
        ],
        device=torch.device("meta"),
    )


def test_default_sharders_cover_each_module_type_once() -> None:
    sharders = get_default_sharders()
    assert [type(s) for s in sharders] == [
        EmbeddingBagCollectionSharder,
        EmbeddingCollectionSharder,
        QuantEmbeddingBagCollectionSharder,
        QuantEmbeddingCollectionSharder,
    ]
    assert all(a is not b for a, b in zip(sharders, get_default_sharders(), strict=True))
    by_type = get_module_to_default_sharders()
    for s in sharders:
        assert isinstance(by_type[s.module_type], type(s))
    assert by_type[FusedEmbeddingBagCollection] is by_type[EmbeddingBagCollection]


def test_apply_to_all_builds_the_same_plan_as_naming_every_table() -> None:
    module = ebc()
    gen = row_wise()
    per_param = apply_to_all(module, gen)
    assert per_param == {"t0": gen, "t1": gen, "t2": gen}
    got = construct_module_sharding_plan(module, per_param, world_size=2)
    expected = construct_module_sharding_plan(
        module, {f"t{i}": row_wise() for i in range(3)}, world_size=2
    )
    assert got == expected
    ec = EmbeddingCollection(
        tables=[EmbeddingConfig(name="e", embedding_dim=4, num_embeddings=6, feature_names=["f"])],
        device=torch.device("meta"),
    )
    assert list(apply_to_all(ec, table_wise(rank=1), EmbeddingCollectionSharder())) == ["e"]


def test_apply_to_all_bad_inputs() -> None:
    with pytest.raises(TypeError, match="EmbeddingCollectionSharder shards EmbeddingCollection"):
        apply_to_all(ebc(), row_wise(), EmbeddingCollectionSharder())
    with pytest.raises(ValueError, match="no default sharder for Linear"):
        apply_to_all(nn.Linear(2, 2), row_wise())
