"""Quantized collections with dynamic (raw-id) tables: against the float dynamic module in
evaluation, scripted, and reloaded where shardrec is not importable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _quant_cases import qconfig

from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    PoolingType,
    QuantEmbeddingBagCollection,
)
from shardrec_embedding.quant.dynamic import ScriptableIdMap
from shardrec_jagged import KeyedJaggedTensor, script_fields
from shardrec_testing import assert_scripted_reloads_without_shardrec

CAPACITY = 40


def _tables(unknown: str, pooling: PoolingType) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="users",
            num_embeddings=CAPACITY,
            embedding_dim=8,
            feature_names=["user"],
            pooling=pooling,
            dynamic=DynamicTableConfig(eviction="LRU", unknown_id=unknown),  # type: ignore[arg-type]
        ),
        EmbeddingBagConfig(name="static", num_embeddings=10, embedding_dim=4, feature_names=["s"]),
        EmbeddingBagConfig(
            name="pairs",
            num_embeddings=CAPACITY,
            embedding_dim=8,
            feature_names=["pair"],
            pooling=pooling,
            dynamic=DynamicTableConfig(eviction="NONE", unknown_id=unknown),  # type: ignore[arg-type]
        ),
    ]


def _raw_ids(gen: torch.Generator, n: int, pool: torch.Tensor) -> torch.Tensor:
    return pool[torch.randint(0, pool.numel(), (n,), generator=gen)]


def _batch(gen: torch.Generator, batch: int, pool: torch.Tensor) -> KeyedJaggedTensor:
    lengths = torch.randint(0, 4, (3 * batch,), generator=gen)
    lengths[batch : 2 * batch] = 1  # the static feature: one id per bag
    n = [int(x) for x in lengths.view(3, batch).sum(1)]
    values = torch.cat(
        [
            _raw_ids(gen, n[0], pool),
            torch.randint(0, 10, (n[1],), generator=gen),
            _raw_ids(gen, n[2], pool),
        ]
    )
    return KeyedJaggedTensor(keys=["user", "s", "pair"], values=values, lengths=lengths)


def _trained(unknown: str, pooling: PoolingType) -> tuple[EmbeddingBagCollection, torch.Tensor]:
    """A float collection whose dynamic tables saw (and evicted) raw ids; the id pool."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    # Any int64 value: negatives, extremes, hashed-looking ones.
    pool = torch.cat(
        [
            torch.tensor([-(2**63), 2**63 - 1, -1, 0, 7]),
            torch.randint(-(2**62), 2**62, (70,), generator=gen),
        ]
    )
    ebc = EmbeddingBagCollection(_tables(unknown, pooling))
    for _ in range(6):
        ebc(_batch(gen, 16, pool))  # training mode: admits, evicts (users), rejects (pairs)
    ebc.dynamic_tables.table("users").default_row.copy_(torch.linspace(-1, 1, 8))
    ebc.dynamic_tables.table("pairs").default_row.copy_(torch.linspace(2, 3, 8))
    ebc.eval()
    return ebc, pool


def test_id_map_matches_a_dict() -> None:
    gen = torch.Generator().manual_seed(3)
    ids = torch.unique(torch.randint(-(2**63), 2**63 - 1, (500,), generator=gen))
    slots = torch.randperm(ids.numel(), generator=gen)
    id_map = ScriptableIdMap(1024)
    id_map.fill(ids, slots)
    reference = dict(zip(ids.tolist(), slots.tolist(), strict=True))
    queries = torch.cat([ids, torch.randint(-(2**63), 2**63 - 1, (300,), generator=gen)])
    want = torch.tensor([reference.get(i, -1) for i in queries.tolist()])
    assert torch.equal(id_map(queries), want)
    assert torch.equal(torch.jit.script(id_map)(queries), want)


@pytest.mark.parametrize("unknown", ["ZERO", "DEFAULT_ROW"])
@pytest.mark.parametrize("pooling", [PoolingType.SUM, PoolingType.MEAN])
def test_quantized_matches_float_dynamic_module(unknown: str, pooling: PoolingType) -> None:
    ebc, pool = _trained(unknown, pooling)
    stats = ebc.dynamic_tables.stats()
    assert stats["users"]["evictions"] > 0 and stats["pairs"]["rejections"] > 0
    ebc.qconfig = qconfig(torch.float16)
    q = QuantEmbeddingBagCollection.from_float(ebc)
    gen = torch.Generator().manual_seed(9)
    for _ in range(3):  # known and unknown raw ids (the pool holds more ids than slots)
        kjt = _batch(gen, 12, pool)
        want = ebc(kjt).values()
        torch.testing.assert_close(q(kjt).values(), want, atol=2e-3, rtol=1e-3)
        scripted = torch.jit.script(q)
        torch.testing.assert_close(scripted(kjt).values(), want, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.int8, torch.quint4x2])
def test_int8_int4_close_to_float(dtype: torch.dtype) -> None:
    ebc, pool = _trained("DEFAULT_ROW", PoolingType.SUM)
    ebc.qconfig = qconfig(dtype)
    q = QuantEmbeddingBagCollection.from_float(ebc)
    kjt = _batch(torch.Generator().manual_seed(4), 16, pool)
    atol = 0.05 if dtype == torch.int8 else 0.2
    torch.testing.assert_close(q(kjt).values(), ebc(kjt).values(), atol=atol, rtol=0)


def test_scripted_artifact_maps_raw_ids_without_shardrec(tmp_path: Path) -> None:
    ebc, pool = _trained("DEFAULT_ROW", PoolingType.MEAN)
    ebc.qconfig = qconfig(torch.int8)
    q = QuantEmbeddingBagCollection.from_float(ebc)
    kjt = _batch(torch.Generator().manual_seed(5), 16, pool)
    scripted = torch.jit.script(q)
    expected = q(kjt).values()
    torch.testing.assert_close(ebc(kjt).values(), expected, atol=0.05, rtol=0)

    class Values(torch.nn.Module):  # the artifact returns the pooled tensor
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return self.inner(kjt).values()

    scripted = torch.jit.script(Values(q))
    assert torch.equal(scripted(kjt), expected)
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)
    # the tensor-argument form too
    lookup = torch.jit.script(q.scriptable(kjt.keys()))
    assert torch.equal(lookup(kjt.values(), kjt.lengths(), None), expected)


def test_state_dict_carries_the_id_maps() -> None:
    ebc, pool = _trained("DEFAULT_ROW", PoolingType.SUM)
    ebc.qconfig = qconfig(torch.int8)
    q = QuantEmbeddingBagCollection.from_float(ebc)
    fresh = QuantEmbeddingBagCollection(q.embedding_bag_configs())
    fresh.load_state_dict(q.state_dict())
    kjt = _batch(torch.Generator().manual_seed(6), 16, pool)
    assert torch.equal(fresh(kjt).values(), q(kjt).values())
    ids, slots = ebc.dynamic_tables.table("users").items()
    other = QuantEmbeddingBagCollection(q.embedding_bag_configs())
    other.load_state_dict(q.state_dict())
    other.load_id_maps({"users": (ids, slots), "pairs": ebc.dynamic_tables.table("pairs").items()})
    assert torch.equal(other(kjt).values(), q(kjt).values())


def test_load_id_maps_refused_without_dynamic_tables() -> None:
    q = QuantEmbeddingBagCollection(
        [EmbeddingBagConfig(name="t", num_embeddings=4, embedding_dim=4, feature_names=["f"])]
    )
    with pytest.raises(ValueError, match="no table is dynamic"):
        q.load_id_maps({})
