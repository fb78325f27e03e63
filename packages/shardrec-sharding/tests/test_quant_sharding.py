"""shard_quant_model: sharded quantized EBCs equal the unsharded quantized module."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    PoolingType,
    QuantEmbeddingBagCollection,
    quantize_inference_model,
)
from shardrec_jagged import KeyedJaggedTensor, script_fields
from shardrec_planner import ParameterConstraints, PlannerError
from shardrec_sharding import ShardedQuantEmbeddingBagCollection, shard_quant_model

# (name, rows, dim, features): "a" is read by two tables.
_TABLE_SPECS = [("big", 41, 256, ["a", "b"]), ("small", 13, 8, ["c"]), ("other", 30, 16, ["a"])]


def _tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=name, num_embeddings=rows, embedding_dim=dim, feature_names=feats, pooling=pooling
        )
        for name, rows, dim, feats in _TABLE_SPECS
    ]


def _kjt(batch: int, seed: int, weighted: bool) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    keys = ["c", "a", "b"]  # not table order
    limits = {"a": 30, "b": 41, "c": 13}
    lengths = torch.randint(0, 4, (3 * batch,), generator=gen)
    lengths[0] = 0  # an empty bag
    per_key = lengths.view(3, batch).sum(1).tolist()
    values = torch.cat(
        [
            torch.randint(0, limits[k], (n,), generator=gen)
            for k, n in zip(keys, per_key, strict=True)
        ]
    )
    weights = torch.rand(values.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, weights=weights)


def _constraints(sharding_type: str) -> dict[str, ParameterConstraints]:
    cw = sharding_type == "column_wise"
    return {
        "big": ParameterConstraints(
            sharding_types=[sharding_type], min_partition=128 if cw else None
        ),
        # column blocks need dim >= 2 * 128: the small tables take the other types
        "small": ParameterConstraints(sharding_types=["row_wise" if cw else sharding_type]),
        "other": ParameterConstraints(sharding_types=["table_wise" if cw else sharding_type]),
    }


CASES = [
    (st, dtype, world)
    for st in ("table_wise", "row_wise", "column_wise")
    for dtype in (torch.int8, torch.quint4x2, torch.float16)
    for world in (1, 3)
]


@pytest.mark.parametrize("sharding_type,dtype,world", CASES)
@pytest.mark.parametrize("pooling,weighted", [(PoolingType.SUM, True), (PoolingType.MEAN, False)])
def test_sharded_equals_unsharded(
    sharding_type: str, dtype: torch.dtype, world: int, pooling: PoolingType, weighted: bool
) -> None:
    torch.manual_seed(world)
    model = nn.Sequential(EmbeddingBagCollection(_tables(pooling), is_weighted=weighted))
    model = quantize_inference_model(model, dtype)
    kjt = _kjt(5, world, weighted)
    expected = model(kjt)
    sharded, plan = shard_quant_model(
        model, world_size=world, compute_device="cpu", constraints=_constraints(sharding_type)
    )
    assert isinstance(sharded[0], ShardedQuantEmbeddingBagCollection)
    entries = plan.get_plan_for_module("0")
    assert entries is not None and entries["big"].sharding_type.value == sharding_type
    if world > 1 and sharding_type != "table_wise":
        assert len(set(entries["big"].ranks)) > 1
    got = sharded(kjt)
    assert got.keys() == expected.keys()
    # row_wise adds per-shard partial sums: equal up to float reassociation (and, for fp16
    # tables, the kernel's fp16 output rounding of each partial sum)
    tol = 2.0**-10 if dtype is torch.float16 else 1e-6
    torch.testing.assert_close(got.values(), expected.values(), rtol=tol, atol=tol)
    if sharding_type == "table_wise":  # the other cases put some table row_wise
        assert torch.equal(got.values(), expected.values())
    elif sharding_type == "column_wise":  # column blocks of "big" are exact
        got_d, want_d = got.to_dict(), expected.to_dict()
        assert torch.equal(got_d["a@big"], want_d["a@big"]) and torch.equal(got_d["b"], want_d["b"])
    scripted = torch.jit.script(sharded[0])  # forward takes the KJT (Sequential: untyped)
    assert torch.equal(scripted(kjt).values(), got.values())
    flat = torch.jit.script(sharded[0].scriptable(kjt.keys()))
    assert torch.equal(flat(kjt.values(), kjt.lengths(), kjt.weights_or_none()), got.values())


class _ValuesOf(nn.Module):
    """What a server returns: tensors (a loaded artifact hands no KeyedTensor to Python)."""

    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.ebc(kjt).values()


def test_scripted_sharded_artifact_reloads(tmp_path: Path) -> None:
    q = quantize_inference_model(EmbeddingBagCollection(_tables(PoolingType.SUM)), torch.int8)
    assert isinstance(q, QuantEmbeddingBagCollection)
    kjt = _kjt(4, 0, False)
    sharded, _ = shard_quant_model(
        q, world_size=2, compute_device="cpu", constraints=_constraints("row_wise")
    )
    expected = sharded(kjt).values()
    path = tmp_path / "sharded.pt"
    torch.jit.save(torch.jit.script(_ValuesOf(sharded)), str(path))
    torch.save({"kjt": script_fields(kjt), "e": expected}, tmp_path / "io.pt")
    code = textwrap.dedent(f"""
        import sys, types, torch
        m = torch.jit.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        assert not any(n.startswith("shardrec") for n in sys.modules)
        assert torch.equal(m(types.SimpleNamespace(**io["kjt"])), io["e"])
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


def test_bad_input() -> None:
    q = quantize_inference_model(EmbeddingBagCollection(_tables(PoolingType.SUM)), torch.int8)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        shard_quant_model(q, world_size=0, compute_device="cpu")
    with pytest.raises(ValueError, match="'tpu'"):
        shard_quant_model(q, world_size=1, compute_device="tpu")
    with pytest.raises(PlannerError):
        shard_quant_model(
            q,
            world_size=2,
            compute_device="cpu",
            constraints={"big": ParameterConstraints(sharding_types=["data_parallel"])},
        )
    sharded, _ = shard_quant_model(
        q, world_size=2, compute_device="cpu", constraints=_constraints("row_wise")
    )
    bad = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c"], torch.tensor([1, 2, 13]), torch.tensor([1, 1, 1])
    )
    with pytest.raises(
        IndexError, match="feature 'c' id 13 is out of range for table 'small' with 13 rows"
    ):
        sharded(bad)


def test_int4_column_block_must_split_on_a_byte() -> None:
    from shardrec_planner import (
        EnumerableShardingSpec,
        ParameterSharding,
        ShardingPlan,
        ShardMetadata,
    )

    table = EmbeddingBagConfig(name="t", num_embeddings=4, embedding_dim=6, feature_names=["f"])
    q = quantize_inference_model(EmbeddingBagCollection([table]), torch.quint4x2)
    shards = (
        ShardMetadata(shard_offsets=(0, 0), shard_sizes=(4, 3), placement="rank:0/cpu"),
        ShardMetadata(shard_offsets=(0, 3), shard_sizes=(4, 3), placement="rank:1/cpu"),
    )
    ps = ParameterSharding(
        sharding_type="column_wise",
        compute_kernel="dense",
        ranks=(0, 1),
        sharding_spec=EnumerableShardingSpec(shards=shards),
    )
    plan = ShardingPlan(plan={"": {"t": ps}})
    with pytest.raises(ValueError, match=r"column block \[0, 3\) does not start and end on a byte"):
        shard_quant_model(q, world_size=2, compute_device="cpu", plan=plan)
