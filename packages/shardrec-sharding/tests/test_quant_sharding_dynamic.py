"""shard_quant_model of a quantized EBC or EC with dynamic (raw-id) tables: the sharded module
maps raw ids with the unsharded module's id maps, then reads its shards; equal to the
unsharded quantized module and close to the float dynamic module; scripted artifact without
shardrec."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    PoolingType,
    quantize_inference_model,
)
from shardrec_jagged import KeyedJaggedTensor, script_fields
from shardrec_planner import ParameterConstraints
from shardrec_sharding import (
    ShardedQuantEmbeddingBagCollection,
    ShardedQuantEmbeddingCollection,
    shard_quant_model,
)
from shardrec_testing import assert_scripted_reloads_without_shardrec


def _tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="users",
            num_embeddings=48,
            embedding_dim=16,
            feature_names=["user"],
            pooling=pooling,
            dynamic=DynamicTableConfig(unknown_id="DEFAULT_ROW"),  # type: ignore[arg-type]
        ),
        EmbeddingBagConfig(
            name="static", num_embeddings=12, embedding_dim=8, feature_names=["s"], pooling=pooling
        ),
    ]


def _kjt(gen: torch.Generator, batch: int, pool: torch.Tensor) -> KeyedJaggedTensor:
    lengths = torch.randint(0, 4, (2 * batch,), generator=gen)
    n = [int(x) for x in lengths.view(2, batch).sum(1)]
    values = torch.cat(
        [
            torch.randint(0, 12, (n[0],), generator=gen),
            pool[torch.randint(0, pool.numel(), (n[1],), generator=gen)],
        ]
    )
    return KeyedJaggedTensor(keys=["s", "user"], values=values, lengths=lengths)


def _trained(pooling: PoolingType) -> tuple[EmbeddingBagCollection, torch.Tensor]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    pool = torch.randint(-(2**63), 2**63 - 1, (80,), generator=gen)
    ebc = EmbeddingBagCollection(_tables(pooling))
    for _ in range(5):  # training mode: 80 raw ids into 48 slots (LRU evicts)
        ebc(_kjt(gen, 16, pool))
    ebc.dynamic_tables.table("users").default_row.copy_(torch.linspace(-1, 1, 16))
    ebc.eval()
    return ebc, pool


@pytest.mark.parametrize("sharding_type", ["table_wise", "row_wise", "column_wise"])
@pytest.mark.parametrize("pooling", [PoolingType.SUM, PoolingType.MEAN])
def test_sharded_dynamic_equals_unsharded(sharding_type: str, pooling: PoolingType) -> None:
    ebc, pool = _trained(pooling)
    assert ebc.dynamic_tables.stats()["users"]["evictions"] > 0
    kjt = _kjt(torch.Generator().manual_seed(7), 8, pool)
    want_float = ebc(kjt).values()
    q = quantize_inference_model(nn.Sequential(ebc), torch.float16)
    expected = q(kjt).values()
    torch.testing.assert_close(expected, want_float, atol=2e-3, rtol=1e-3)
    constraints = {
        "users": ParameterConstraints(
            sharding_types=[sharding_type],
            min_partition=8 if sharding_type == "column_wise" else None,
        )
    }
    sharded, _ = shard_quant_model(q, world_size=2, compute_device="cpu", constraints=constraints)
    assert isinstance(sharded[0], ShardedQuantEmbeddingBagCollection)
    got = sharded(kjt).values()
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)
    scripted = torch.jit.script(sharded[0])
    assert torch.equal(scripted(kjt).values(), got)


class _ValuesOf(nn.Module):
    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.ebc(kjt).values()


def test_sharded_dynamic_artifact_reloads_without_shardrec(tmp_path: Path) -> None:
    ebc, pool = _trained(PoolingType.SUM)
    q = quantize_inference_model(ebc, torch.int8)
    constraints = {"users": ParameterConstraints(sharding_types=["row_wise"])}
    sharded, _ = shard_quant_model(q, world_size=2, compute_device="cpu", constraints=constraints)
    kjt = _kjt(torch.Generator().manual_seed(3), 8, pool)
    expected = sharded(kjt).values()
    torch.testing.assert_close(expected, ebc(kjt).values(), atol=0.05, rtol=0)
    scripted = torch.jit.script(_ValuesOf(sharded))
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)


def _ec_tables() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(
            name="users",
            num_embeddings=48,
            embedding_dim=16,
            feature_names=["user"],
            dynamic=DynamicTableConfig(unknown_id="DEFAULT_ROW"),  # type: ignore[arg-type]
        ),
        EmbeddingConfig(name="static", num_embeddings=12, embedding_dim=16, feature_names=["s"]),
    ]


def _trained_ec() -> tuple[EmbeddingCollection, torch.Tensor]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    pool = torch.randint(-(2**63), 2**63 - 1, (80,), generator=gen)
    ec = EmbeddingCollection(_ec_tables())
    for _ in range(5):  # training mode: 80 raw ids into 48 slots (LRU evicts)
        ec(_kjt(gen, 16, pool))
    ec.dynamic_tables.table("users").default_row.copy_(torch.linspace(-1, 1, 16))
    ec.eval()
    return ec, pool


class _SequenceValues(nn.Module):
    def __init__(self, ec: nn.Module) -> None:
        super().__init__()
        self.ec = ec

    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        return {k: v.values() for k, v in self.ec(kjt).items()}


@pytest.mark.parametrize("sharding_type", ["table_wise", "row_wise", "column_wise"])
def test_sharded_dynamic_sequence_equals_unsharded(sharding_type: str, tmp_path: Path) -> None:
    ec, pool = _trained_ec()
    assert ec.dynamic_tables.stats()["users"]["evictions"] > 0
    kjt = _kjt(torch.Generator().manual_seed(7), 8, pool)
    want_float = {k: v.values() for k, v in ec(kjt).items()}
    q = quantize_inference_model(nn.Sequential(ec), torch.float16)
    expected = {k: v.values() for k, v in q(kjt).items()}
    for name, rows in want_float.items():
        torch.testing.assert_close(expected[name], rows, atol=2e-3, rtol=1e-3)
    constraints = {
        "users": ParameterConstraints(
            sharding_types=[sharding_type],
            min_partition=8 if sharding_type == "column_wise" else None,
        )
    }
    sharded, _ = shard_quant_model(q, world_size=2, compute_device="cpu", constraints=constraints)
    assert isinstance(sharded[0], ShardedQuantEmbeddingCollection)
    got = {k: v.values() for k, v in sharded(kjt).items()}
    assert list(got) == list(expected)
    assert all(torch.equal(got[k], v) for k, v in expected.items())  # rows copied, not summed
    scripted = torch.jit.script(_SequenceValues(sharded[0]))
    assert all(torch.equal(scripted(kjt)[k], v) for k, v in expected.items())
    if sharding_type == "row_wise":
        assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)
