"""ShardedManagedCollisionEmbeddingBagCollection on real gloo ranks against unsharded
references: the remapped ids equal those of per-owner unsharded MC modules fed every rank's ids
in rank order, and the pooled output equals the unsharded EmbeddingBagCollection on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.mc import (
    HashZchManagedCollisionModule,
    LFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
    ManagedCollisionModule,
    MCHManagedCollisionModule,
)
from shardrec_embedding.mc.embedding_modules import evict
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding.mc import (
    ManagedCollisionEmbeddingBagCollectionSharder,
    ManagedCollisionEmbeddingCollectionSharder,
)
from shardrec_testing import RankContext, assert_close, seeded_generator

ROWS, DIM, HASH = 12, 4, 1 << 20
EMPTY = (1 << 63) - 1  # an MCH slot's raw id while no id holds it
STEPS = 4


def _init(w: torch.Tensor) -> torch.Tensor:
    return torch.nn.init.constant_(w, 0.25)


def _configs() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t",
            embedding_dim=DIM,
            num_embeddings=ROWS,
            feature_names=["f", "g"],
            init_fn=_init,
        )
    ]


def _mch(rows: int = ROWS) -> MCHManagedCollisionModule:
    return MCHManagedCollisionModule(
        zch_size=rows,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
        input_hash_size=HASH,
    )


def _ebc() -> EmbeddingBagCollection:
    ebc = EmbeddingBagCollection(tables=_configs())
    with torch.no_grad():
        w = ebc.embedding_bags["t"].weight
        w.copy_(torch.randn(w.shape, generator=seeded_generator("mc-weights")))
    return ebc


def _batch(rank: int, step: int) -> KeyedJaggedTensor:
    g = seeded_generator("mc-batch", rank, step)
    size = (rank + step) % 3 + 1
    lengths = torch.randint(0, 4, (2 * size,), generator=g)
    pool = torch.tensor([1, 2, 3, 5, 8, HASH // 2 + 1, HASH // 2 + 7, HASH - 1, HASH + 3, -5])
    values = pool[torch.randint(0, pool.numel(), (int(lengths.sum()),), generator=g)]
    return KeyedJaggedTensor(["g", "f"], values, lengths=lengths, stride=size)


def _reference_rows(
    kind: str,
    world: int,
    rank: int,
    make: Callable[[], ManagedCollisionModule] | None = None,
    reused: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Per step, this rank's remapped ids by per-owner unsharded MC modules; `reused` (MCH)
    gets, per step, the rows the step took from other ids (those a sharded module resets)."""
    if kind == "table_wise":
        owners_bounds = [(0, ROWS)]
    else:
        per = ROWS // world
        owners_bounds = [(r * per, (r + 1) * per) for r in range(world)]
    segments = [b for b, _ in owners_bounds] + [ROWS]
    make = make or _mch
    modules = [make().rebuild_with_output_id_range(b, segments) for b in owners_bounds]
    block = -(-HASH // len(owners_bounds))
    hashzch = isinstance(modules[0], HashZchManagedCollisionModule)
    out = []
    for step in range(STEPS):
        per_rank = []
        for r in range(world):
            kjt = _batch(r, step)
            ids = torch.cat([kjt["f"].values(), kjt["g"].values()])
            owner = torch.div(torch.remainder(ids, HASH), block, rounding_mode="floor")
            if hashzch:  # bucket id % 2, one bucket per owner (table-wise: one owner)
                owner = torch.remainder(ids, 2) if len(modules) == 2 else torch.zeros_like(ids)
            per_rank.append((ids, owner))
        mine = torch.empty_like(per_rank[rank][0])
        taken: list[int] = []
        for d, module in enumerate(modules):
            before = _owners(module) if isinstance(module, MCHManagedCollisionModule) else {}
            sent = [ids[owner == d] for ids, owner in per_rank]
            jt = JaggedTensor(
                values=torch.cat(sent), lengths=torch.tensor([x.numel() for x in sent])
            )
            rows = module({"t": jt})["t"].values()
            if before:
                after = _owners(module)
                taken += [row for row, raw in before.items() if raw != EMPTY and after[row] != raw]
            start = sum(x.numel() for x in sent[:rank])
            mine[per_rank[rank][1] == d] = rows[start : start + sent[rank].numel()]
        out.append(mine)
        if reused is not None:
            reused.append(torch.tensor(taken, dtype=torch.int64))
    return out


def _shard(ctx: RankContext, kind: str, module: Any, sharder: Any) -> Any:
    """`module`'s single table "t" planned `kind` (row_wise or table_wise on rank 0), sharded."""
    generator = row_wise() if kind == "row_wise" else table_wise(rank=0)
    plan = construct_module_sharding_plan(
        module._embedding_module,
        {"t": generator},
        world_size=ctx.world_size,
        local_world_size=ctx.world_size,
    )
    return sharder.shard(module, dict(plan), ShardingEnv.from_process_group(ctx.pg))


def _run(ctx: RankContext, kind: str) -> int:
    module = ManagedCollisionEmbeddingBagCollection(
        _ebc(), ManagedCollisionCollection({"t": _mch()}, _configs())
    )
    sharded = _shard(ctx, kind, module, ManagedCollisionEmbeddingBagCollectionSharder())
    reference = _ebc()
    reused: list[torch.Tensor] = []
    expected_rows = _reference_rows(kind, ctx.world_size, ctx.rank, reused=reused)
    for step in range(STEPS):
        kjt = _batch(ctx.rank, step)
        got = sharded(kjt)[0].wait()  # type: ignore[index]
        want_ids = expected_rows[step]
        remapped = KeyedJaggedTensor(
            ["f", "g"], want_ids, lengths=kjt.permute([1, 0]).lengths(), stride=kjt.stride()
        )
        # rows taken from other ids are reset (constant init); rows no id held are kept
        evict({"t": reused[step]}, reference)
        assert_close(got.values(), reference(remapped).values(), msg=f"{kind} step {step}")
    return STEPS


@pytest.mark.parametrize("kind", ["row_wise", "table_wise"])
def test_sharded_mc_ebc_matches_unsharded_references(pool_factory, kind):  # type: ignore[no-untyped-def]
    assert pool_factory(2).run(_run, kind) == [STEPS, STEPS]


def _owners(mc: MCHManagedCollisionModule) -> dict[int, int]:
    return dict(
        zip(mc._mch_remapped_ids_mapping.tolist(), mc._mch_sorted_raw_ids.tolist(), strict=True)
    )


def _run_training(ctx: RankContext) -> int:
    """Rows that change owner are reset (weight to the init, fused Adagrad state to zero) before
    the lookup reads them, on the rank that holds them."""
    from shardrec_optim import EmbOptimType

    env = ShardingEnv.from_process_group(ctx.pg)
    module = ManagedCollisionEmbeddingBagCollection(
        _ebc(), ManagedCollisionCollection({"t": _mch()}, _configs())
    )
    plan = dict(
        construct_module_sharding_plan(
            module._embedding_module, {"t": row_wise()}, world_size=2, local_world_size=2
        )
    )
    sharder = ManagedCollisionEmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.5}
    )
    sharded = sharder.shard(module, plan, env)
    local = sharded._managed_collision_modules["t"]
    weight = dict(sharded._embedding_module.named_parameters())["embedding_bags.t.weight"]
    state = sharded._embedding_module.fused_optimizer.state[weight]["t.momentum1"]
    offset = local._output_global_offset
    resets = 0
    for step in range(8):
        before = _owners(local)
        g = seeded_generator("mc-train", ctx.rank, step)
        values = torch.randint(0, 40, (6,), generator=g) * (HASH // 40)
        kjt = KeyedJaggedTensor(["f", "g"], values, lengths=torch.tensor([2, 1, 2, 1]), stride=2)
        out = sharded(kjt)[0].wait()
        # rows taken from another id are reset; rows no id held keep their weights
        changed = [
            row
            for row, raw in _owners(local).items()
            if before[row] != raw and before[row] != EMPTY
        ]
        for row in changed:
            assert torch.equal(weight[row - offset], torch.full((DIM,), 0.25)), (step, row)
            assert float(state[row - offset]) == 0.0, (step, row)
        resets += len(changed)
        out.values().sum().backward()
    return resets


def test_rows_handed_to_new_ids_are_reset_with_their_optimizer_state(pool_factory):  # type: ignore[no-untyped-def]
    resets = pool_factory(2).run(_run_training)
    assert all(n > 0 for n in resets), resets


def _seq_configs() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(
            name="t",
            embedding_dim=DIM,
            num_embeddings=ROWS,
            feature_names=["f", "g"],
            init_fn=_init,
        )
    ]


def _ec() -> EmbeddingCollection:
    ec = EmbeddingCollection(tables=_seq_configs())
    with torch.no_grad():
        w = ec.embeddings["t"].weight
        w.copy_(torch.randn(w.shape, generator=seeded_generator("mc-weights")))
    return ec


def _run_sequence(ctx: RankContext, kind: str) -> int:
    """The MC EmbeddingCollection: each feature's rows equal the unsharded EmbeddingCollection's
    on the reference remapped ids."""
    module = ManagedCollisionEmbeddingCollection(
        _ec(), ManagedCollisionCollection({"t": _mch()}, _seq_configs())
    )
    sharded = _shard(ctx, kind, module, ManagedCollisionEmbeddingCollectionSharder())
    reference = _ec()
    reused: list[torch.Tensor] = []
    expected_rows = _reference_rows(kind, ctx.world_size, ctx.rank, reused=reused)
    for step in range(STEPS):
        kjt = _batch(ctx.rank, step)
        got = sharded(kjt)[0].wait()  # type: ignore[index]
        want_ids = expected_rows[step]
        remapped = KeyedJaggedTensor(
            ["f", "g"], want_ids, lengths=kjt.permute([1, 0]).lengths(), stride=kjt.stride()
        )
        evict({"t": reused[step]}, reference)
        want = reference(remapped)
        for feature in ("f", "g"):
            assert_close(got[feature].values(), want[feature].values(), msg=f"{kind} {step}")
    return STEPS


@pytest.mark.parametrize("kind", ["row_wise", "table_wise"])
def test_sharded_mc_ec_matches_unsharded_references(pool_factory, kind):  # type: ignore[no-untyped-def]
    assert pool_factory(2).run(_run_sequence, kind) == [STEPS, STEPS]


def _hash() -> HashZchManagedCollisionModule:
    return HashZchManagedCollisionModule(
        zch_size=ROWS, device=torch.device("cpu"), total_num_buckets=2, max_probe=3
    )


def _run_hash(ctx: RankContext, kind: str) -> int:
    """HashZch: ids go to the rank holding their bucket; rows as per-bucket unsharded modules."""
    env = ShardingEnv.from_process_group(ctx.pg)
    module = ManagedCollisionEmbeddingBagCollection(
        _ebc(), ManagedCollisionCollection({"t": _hash()}, _configs())
    )
    generator = row_wise() if kind == "row_wise" else table_wise(rank=0)
    plan = dict(
        construct_module_sharding_plan(
            module._embedding_module, {"t": generator}, world_size=2, local_world_size=2
        )
    )
    sharded = ManagedCollisionEmbeddingBagCollectionSharder().shard(module, plan, env)
    expected = _reference_rows(kind, 2, ctx.rank, _hash)
    for step in range(STEPS):
        got = sharded.remap(_batch(ctx.rank, step))  # type: ignore[operator]
        assert got.values().tolist() == expected[step].tolist(), (kind, step)
    return STEPS


@pytest.mark.parametrize("kind", ["row_wise", "table_wise"])
def test_sharded_hash_zch_routes_ids_to_their_buckets_rank(pool_factory, kind):  # type: ignore[no-untyped-def]
    assert pool_factory(2).run(_run_hash, kind) == [STEPS, STEPS]


def _run_keys(ctx: RankContext, kind: str) -> list[str]:
    """TorchRec's layout: the sharded module's MC modules live in `_managed_collision_collection`
    (a `ShardedManagedCollisionCollection`) and its state-dict keys are the unsharded module's."""
    from shardrec_sharding.mc import ShardedManagedCollisionCollection

    env = ShardingEnv.from_process_group(ctx.pg)
    module = ManagedCollisionEmbeddingBagCollection(
        _ebc(), ManagedCollisionCollection({"t": _mch()}, _configs())
    )
    unsharded_keys = sorted(module.state_dict())
    generator = row_wise() if kind == "row_wise" else table_wise(rank=0)
    plan = dict(
        construct_module_sharding_plan(
            module._embedding_module, {"t": generator}, world_size=2, local_world_size=2
        )
    )
    sharded = ManagedCollisionEmbeddingBagCollectionSharder().shard(module, plan, env)
    collection = sharded._managed_collision_collection
    assert isinstance(collection, ShardedManagedCollisionCollection)
    owns = kind == "row_wise" or ctx.rank == 0
    assert list(collection._managed_collision_modules) == (["t"] if owns else [])
    assert sharded._managed_collision_modules is collection._managed_collision_modules
    slots = sharded.open_slots()
    rows = ROWS // 2 if kind == "row_wise" else ROWS
    free = rows - 1  # MCH keeps its last row for ids it has not admitted
    assert {k: v.tolist() for k, v in slots.items()} == ({"t": [free]} if owns else {})
    sharded(_batch(ctx.rank, 0))[0].wait()
    assert sharded.evict() == ({"t": None} if owns else {})  # the forward reset them already
    keys = sorted(sharded.state_dict())
    mc_keys = [k for k in unsharded_keys if k.startswith("_managed_collision_collection.")]
    assert keys == (unsharded_keys if owns else sorted(set(unsharded_keys) - set(mc_keys))), keys
    return keys


@pytest.mark.parametrize("kind", ["row_wise", "table_wise"])
def test_sharded_state_dict_keys_are_the_unsharded_modules(pool_factory, kind):  # type: ignore[no-untyped-def]
    keys = pool_factory(2).run(_run_keys, kind)
    assert (
        "_managed_collision_collection._managed_collision_modules.t._mch_sorted_raw_ids" in keys[0]
    )


def _run_zero_hash_size(ctx: RankContext) -> str:
    """Row-wise MCH with input_hash_size=0 cannot route ids: every rank refuses it at shard."""
    env = ShardingEnv.from_process_group(ctx.pg)
    mch = MCHManagedCollisionModule(
        zch_size=ROWS,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
        input_hash_size=0,
    )
    module = ManagedCollisionEmbeddingBagCollection(
        _ebc(), ManagedCollisionCollection({"t": mch}, _configs())
    )
    plan = dict(
        construct_module_sharding_plan(
            module._embedding_module, {"t": row_wise()}, world_size=2, local_world_size=2
        )
    )
    with pytest.raises(ValueError, match=r"input_hash_size is 0.*table_wise") as info:
        ManagedCollisionEmbeddingBagCollectionSharder().shard(module, plan, env)
    return str(info.value)


def test_row_wise_mch_without_an_id_range_is_refused_on_every_rank(pool_factory):  # type: ignore[no-untyped-def]
    messages = pool_factory(2).run(_run_zero_hash_size)
    assert all("table 't'" in m for m in messages), messages
