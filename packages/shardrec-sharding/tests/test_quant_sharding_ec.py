"""shard_quant_model on quantized EmbeddingCollections: sharded equals unsharded (bit-exact)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    QuantEmbeddingCollection,
    quantize_inference_model,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, script_fields
from shardrec_planner import (
    EnumerableShardingSpec,
    ParameterConstraints,
    ParameterSharding,
    ShardingPlan,
    ShardMetadata,
)
from shardrec_sharding import (
    QuantEmbeddingCollectionSharder,
    ShardedQuantEmbeddingBagCollection,
    ShardedQuantEmbeddingCollection,
    shard_quant_model,
)
from shardrec_testing import assert_scripted_reloads_without_shardrec

DIM = 12  # three column blocks of 4 (whole bytes of INT4 codes)
ROWS = {"big": 41, "small": 13, "tiny": 2}  # 41 rows: uneven row blocks on 2 and 3 devices
FEATURES = {"big": ["a", "b"], "small": ["c"], "tiny": ["d"]}
LIMITS = {"a": 41, "b": 41, "c": 13, "d": 2}


def _tables() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=DIM, feature_names=FEATURES[n])
        for n, r in ROWS.items()
    ]


def _kjt(batch: int, seed: int) -> KeyedJaggedTensor:
    """Random ids with an empty bag, duplicate ids and ids on every row-block edge."""
    gen = torch.Generator().manual_seed(seed)
    keys = ["c", "d", "a", "b"]  # not table order
    lengths = torch.randint(0, 5, (len(keys) * batch,), generator=gen)
    if batch:
        lengths[0] = 0  # an empty bag
        lengths[2 * batch] = 8  # feature "a": the edges below plus a duplicate
    per_key = lengths.view(len(keys), batch).sum(1).tolist()
    parts = [
        torch.randint(0, LIMITS[k], (n,), generator=gen) for k, n in zip(keys, per_key, strict=True)
    ]
    if batch:
        edges = torch.tensor([0, 13, 14, 20, 21, 27, 28, 40])  # blocks of 14 (3 dev), 21 (2 dev)
        parts[2][:8] = edges
        parts[2][1] = 40  # duplicate id
    return KeyedJaggedTensor(keys=keys, values=torch.cat(parts), lengths=lengths)


def _model(dtype: torch.dtype, need_indices: bool) -> nn.Module:
    torch.manual_seed(0)
    ec = EmbeddingCollection(_tables(), need_indices=need_indices)
    return quantize_inference_model(nn.Sequential(ec), dtype)


def _constraints(sharding_type: str) -> dict[str, ParameterConstraints]:
    out = {n: ParameterConstraints(sharding_types=[sharding_type], min_partition=4) for n in ROWS}
    # The planner leaves no rank without rows (2 rows over 3 ranks): tiny may go whole.
    out["tiny"] = ParameterConstraints(
        sharding_types=[sharding_type, "table_wise"], min_partition=4
    )
    return out


def _mixed_constraints() -> dict[str, ParameterConstraints]:
    """One table per sharding type: big row_wise, small column_wise, tiny table_wise."""
    return {
        "big": ParameterConstraints(sharding_types=["row_wise"]),
        "small": ParameterConstraints(sharding_types=["column_wise"], min_partition=4),
        "tiny": ParameterConstraints(sharding_types=["table_wise"]),
    }


def _assert_same(got: dict[str, JaggedTensor], want: dict[str, JaggedTensor]) -> None:
    assert list(got) == list(want)
    for name, jt in want.items():
        assert torch.equal(got[name].values(), jt.values()), name
        assert got[name].values().dtype == jt.values().dtype
        assert torch.equal(got[name].lengths(), jt.lengths()), name
        want_ids = jt.weights_or_none()
        got_ids = got[name].weights_or_none()
        assert (got_ids is None) == (want_ids is None)
        if want_ids is not None:
            assert got_ids is not None and torch.equal(got_ids, want_ids)


CASES = [
    (st, dtype, world)
    for st in ("table_wise", "row_wise", "column_wise")
    for dtype in (torch.int8, torch.quint4x2, torch.float16)
    for world in (1, 2, 3)
]


@pytest.mark.parametrize("sharding_type,dtype,world", CASES)
def test_sharded_equals_unsharded(sharding_type: str, dtype: torch.dtype, world: int) -> None:
    need_indices = world != 2
    model = _model(dtype, need_indices)
    kjts = [_kjt(5, world), _kjt(0, 1)]  # a batch of 0 too
    expected = [model(kjt) for kjt in kjts]
    sharded, plan = shard_quant_model(
        model, world_size=world, compute_device="cpu", constraints=_constraints(sharding_type)
    )
    assert isinstance(sharded[0], ShardedQuantEmbeddingCollection)
    entries = plan.get_plan_for_module("0")
    assert entries is not None
    assert {ps.sharding_type.value for n, ps in entries.items() if n != "tiny"} == {sharding_type}
    assert entries["tiny"].sharding_type.value in (sharding_type, "table_wise")
    if world > 1 and sharding_type != "table_wise":
        assert len(set(entries["big"].ranks)) > 1
    if sharding_type == "row_wise" and world > 1:
        sizes = [s.shard_sizes[0] for s in entries["big"].shards]
        assert len(set(sizes)) > 1  # uneven row blocks
    for kjt, want in zip(kjts, expected, strict=True):
        _assert_same(sharded(kjt), want)
    # A plain scripted KJT -> dict forward reads the same rows
    scripted = torch.jit.script(sharded[0])
    for kjt, want in zip(kjts, expected, strict=True):
        _assert_same(scripted(kjt), want)


def test_mixed_plan_output_dtype_and_state() -> None:
    """One table per sharding type in one collection; fp16 output; int32 ids."""
    ec = EmbeddingCollection(_tables(), need_indices=True)
    q = quantize_inference_model(ec, torch.int8, output_dtype=torch.float16)
    assert isinstance(q, QuantEmbeddingCollection)
    kjt = _kjt(6, 3)
    kjt32 = KeyedJaggedTensor(kjt.keys(), kjt.values().int(), lengths=kjt.lengths())
    expected = q(kjt)
    constraints = _mixed_constraints()
    sharded, plan = shard_quant_model(
        q, world_size=3, compute_device="cpu", constraints=constraints
    )
    assert isinstance(sharded, ShardedQuantEmbeddingCollection)
    assert sharded.plan == plan.get_plan_for_module("")
    got = sharded(kjt32)
    assert got["a"].values().dtype == torch.float16
    _assert_same(got, expected)  # int32 ids: the same rows, the ids passed through as given
    _assert_same(sharded(kjt), expected)
    # the shards' state holds the unsharded rows (sliced, not re-quantized)
    state = sharded.state_dict()
    assert any(k.endswith("big__shard1.weight") for k in state)
    assert "rank_modules" in repr(sharded)


def test_model_with_both_collection_kinds() -> None:
    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ec = EmbeddingCollection(_tables())
            bag = EmbeddingBagConfig(
                name="bag", num_embeddings=9, embedding_dim=4, feature_names=["a"]
            )
            self.ebc = EmbeddingBagCollection([bag])

        def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
            out = {k: jt.values() for k, jt in self.ec(kjt).items()}
            out["bag"] = self.ebc(kjt).values()
            return out

    torch.manual_seed(1)
    model = quantize_inference_model(Both(), torch.int8)
    kjt = KeyedJaggedTensor(
        keys=["a", "b", "c", "d"],
        values=torch.tensor([1, 8, 4, 3, 12, 1, 0, 1]),
        lengths=torch.tensor([2, 1, 1, 0, 2, 1, 0, 1]),
    )
    expected = model(kjt)
    sharded, plan = shard_quant_model(model, world_size=2, compute_device="cpu")
    assert isinstance(sharded.ec, ShardedQuantEmbeddingCollection)
    assert isinstance(sharded.ebc, ShardedQuantEmbeddingBagCollection)
    assert plan.get_plan_for_module("ec") is not None
    got = sharded(kjt)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], v) for k, v in expected.items())


class _Values(nn.Module):
    def __init__(self, ec: nn.Module) -> None:
        super().__init__()
        self.ec = ec

    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        return {k: jt.values() for k, jt in self.ec(kjt).items()}


def test_scripted_wrapper_reloads_in_a_fresh_process(tmp_path: Path) -> None:
    model = _model(torch.quint4x2, need_indices=True)
    kjt = _kjt(4, 7)
    sharded, _ = shard_quant_model(
        model, world_size=2, compute_device="cpu", constraints=_constraints("row_wise")
    )
    wrapper = _Values(sharded[0])
    expected = wrapper(kjt)
    scripted = torch.jit.script(wrapper)
    got = scripted(kjt)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], v) for k, v in expected.items())
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)


def test_torch_export_with_kjt_input() -> None:
    model = _model(torch.quint4x2, need_indices=True)
    kjt = _kjt(3, 5)
    constraints = _mixed_constraints()
    sharded, _ = shard_quant_model(
        model, world_size=3, compute_device="cpu", constraints=constraints
    )
    wrapper = _Values(sharded[0])
    expected = wrapper(kjt)
    program = torch.export.export(wrapper, (kjt,), strict=False)
    got = program.module()(kjt)
    assert list(got) == list(expected)
    assert all(torch.equal(got[k], v) for k, v in expected.items())


def _manual_plan(sharding_type: str, ranks: list[int]) -> ShardingPlan:
    """ "big" split into row blocks (or whole, for one rank) on `ranks`; the others on rank 0."""
    blocks = [(0, 21), (21, 20)] if len(ranks) == 2 else [(0, 41)]
    shards = tuple(
        ShardMetadata(shard_offsets=(r0, 0), shard_sizes=(n, DIM), placement=f"rank:{rank}/cpu")
        for (r0, n), rank in zip(blocks, ranks, strict=True)
    )
    entries = {
        "big": ParameterSharding(
            sharding_type=sharding_type,
            compute_kernel="dense",
            ranks=tuple(ranks),
            sharding_spec=EnumerableShardingSpec(shards=shards),
        )
    }
    for name, rows in ROWS.items():
        if name != "big":
            whole = ShardMetadata(
                shard_offsets=(0, 0), shard_sizes=(rows, DIM), placement="rank:0/cpu"
            )
            entries[name] = ParameterSharding(
                sharding_type="table_wise",
                compute_kernel="dense",
                ranks=(0,),
                sharding_spec=EnumerableShardingSpec(shards=(whole,)),
            )
    return ShardingPlan(plan={"0": entries})


def test_manual_plan_matches() -> None:
    model = _model(torch.int8, need_indices=False)
    kjt = _kjt(3, 2)
    expected = model(kjt)
    sharded, _ = shard_quant_model(
        model, world_size=2, compute_device="cpu", plan=_manual_plan("row_wise", [1, 0])
    )
    _assert_same(sharded(kjt), expected)


def test_bad_plans() -> None:
    model = _model(torch.int8, need_indices=False)
    plan = _manual_plan("row_wise", [0, 1])
    dp = ParameterSharding(sharding_type="data_parallel", compute_kernel="dense", ranks=(0, 1))
    bad = ShardingPlan(plan={"0": {**plan.get_plan_for_module("0"), "small": dp}})
    with pytest.raises(ValueError, match="table 'small': sharding type data_parallel is not supp"):
        shard_quant_model(model, world_size=2, compute_device="cpu", plan=bad)
    with pytest.raises(
        ValueError, match="table 'big': shard 1 is placed on rank 2, outside world_size 2"
    ):
        shard_quant_model(
            model, world_size=2, compute_device="cpu", plan=_manual_plan("row_wise", [0, 2])
        )
    with pytest.raises(ValueError, match=r"the plan has no entry for table\(s\) \['tiny'\]"):
        entries = dict(plan.get_plan_for_module("0"))
        del entries["tiny"]
        shard_quant_model(
            model, world_size=2, compute_device="cpu", plan=ShardingPlan(plan={"0": entries})
        )
    half = ShardMetadata(shard_offsets=(0, 0), shard_sizes=(20, DIM), placement="rank:0/cpu")
    short = ParameterSharding(
        sharding_type="row_wise",
        compute_kernel="dense",
        ranks=(0,),
        sharding_spec=EnumerableShardingSpec(shards=(half,)),
    )
    with pytest.raises(
        ValueError, match="table 'big': the shards cover 240 of the table's 41 x 12"
    ):
        entries = {**plan.get_plan_for_module("0"), "big": short}
        shard_quant_model(
            model, world_size=2, compute_device="cpu", plan=ShardingPlan(plan={"0": entries})
        )


def test_bad_input() -> None:
    model = _model(torch.int8, need_indices=False)
    sharded, _ = shard_quant_model(
        model, world_size=2, compute_device="cpu", constraints=_constraints("row_wise")
    )
    scripted = torch.jit.script(sharded[0])
    out_of_range = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"], torch.tensor([1, 2, 13, 0]), torch.tensor([1, 1, 1, 1])
    )
    missing = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b"], torch.tensor([1, 2]), torch.tensor([1, 1])
    )
    weighted = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"],
        torch.tensor([1, 2, 3, 0]),
        torch.tensor([1, 1, 1, 1]),
        weights=torch.ones(4),
    )
    # eager: the Python exception types; scripted: torch.jit.Error with the same message
    for forward, types in ((sharded, (IndexError, ValueError)), (scripted, (torch.jit.Error,) * 2)):
        with pytest.raises(
            types[0], match="feature 'c' id 13 is out of range for table 'small' with 13 rows"
        ):
            forward(out_of_range)
        with pytest.raises(types[1], match=r"lacks feature.*'c'.*'small'"):
            forward(missing)
        with pytest.raises(types[1], match="unweighted but the KeyedJaggedTensor carries weights"):
            forward(weighted)


def test_sharder_is_forward_only() -> None:
    sharder = QuantEmbeddingCollectionSharder()
    q = _model(torch.quint4x2, need_indices=False)[0]
    assert sharder.module_type is QuantEmbeddingCollection
    assert sharder.fused_params is None
    params = sharder.shardable_parameters(q)
    assert list(params) == list(ROWS)
    assert all(p.device.type == "meta" and p.dtype == torch.uint8 for p in params.values())
    assert tuple(params["big"].shape) == (41, DIM)
