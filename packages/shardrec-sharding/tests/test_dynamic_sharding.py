"""Sharded dynamic (raw-id) tables against the unsharded dynamic table.

While nothing is evicted, K steps of a sharded collection (every rank its own batch of raw
ids) give every raw id the same vector as the unsharded fused collection trained on the
concatenation of the ranks' batches, whatever the sharding type; the sharded maps hold
exactly the ids the unsharded map admitted. The rows start from a constant (an id's initial
row would otherwise depend on its slot, which depends on the sharding).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _sharding_placements import generator_for

from shardrec_collectives import PeerError, ShardingEnv
from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder
from shardrec_sharding.dynamic import owner_part
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

FEATURES = ["f0", "f1", "f2", "f3"]
DIMS = [8, 4, 4, 8]  # output blocks: t0<-f0, t1<-f1, t1<-f2, t2<-f3
STEPS = 4
POOL = 8  # distinct raw ids per feature (duplicates within and across ranks and steps)


def _const(w: torch.Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)


@dataclasses.dataclass(frozen=True)
class Case:
    types: tuple[str, str, str]
    optimizer: str
    pooling: str = "SUM"

    def __str__(self) -> str:
        return f"{'/'.join(self.types)}-{self.optimizer}-{self.pooling}"


CASES = [
    Case(("row_wise", "row_wise", "table_wise"), "exact_row_wise_adagrad"),
    Case(("table_wise", "column_wise", "row_wise"), "exact_adagrad", "MEAN"),
    Case(("column_wise", "table_row_wise", "table_wise"), "exact_sgd"),
    Case(("data_parallel", "row_wise", "data_parallel"), "exact_sgd", "MEAN"),
]


def configs(case: Case) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t0", num_embeddings=48, embedding_dim=8, feature_names=["f0"],
            pooling=case.pooling, init_fn=_const,
            dynamic=DynamicTableConfig(eviction="NONE"),
        ),
        EmbeddingBagConfig(
            name="t1", num_embeddings=64, embedding_dim=4, feature_names=["f1", "f2"],
            pooling=case.pooling, init_fn=_const,
            dynamic=DynamicTableConfig(admission="THRESHOLD", admission_threshold=2),
        ),
        EmbeddingBagConfig(
            name="t2", num_embeddings=6, embedding_dim=8, feature_names=["f3"],
            pooling=case.pooling, init_fn=_const,
        ),
    ]  # fmt: skip


def spec_of(case: Case) -> FusedOptimSpec:
    return FusedOptimSpec(optimizer=EmbOptimType(case.optimizer), learning_rate=0.1)


def pools() -> list[torch.Tensor]:
    g = seeded_generator("dyn-shard-pool")
    return [torch.randint(-(2**62), 2**62, (POOL,), generator=g) for _ in FEATURES[:3]]


def batch(tag: str, rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    """Rank `rank`'s batch of `step` (raw ids; f3 static ids) and its loss coefficients."""
    g = seeded_generator("dyn-shard-batch", tag, rank, step)
    size = (rank + step) % 3 + 1
    lengths = random_lengths(len(FEATURES) * size, 3, g)
    per_key = lengths.view(len(FEATURES), size).sum(1).tolist()
    parts = [
        p[torch.randint(0, POOL, (n,), generator=g)]
        for p, n in zip(pools(), per_key[:3], strict=True)
    ]
    parts.append(torch.randint(0, 6, (per_key[3],), generator=g))
    coefficients = torch.randn(size, sum(DIMS), generator=g)
    return KeyedJaggedTensor(FEATURES, torch.cat(parts), lengths=lengths, stride=size), coefficients


def concat_batches(kjts: list[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    """One KJT whose batch is every rank's batch, rank 0's samples first."""
    per_feature = [k.to_dict() for k in kjts]
    values = [d[f].values() for f in FEATURES for d in per_feature]
    lengths = [d[f].lengths() for f in FEATURES for d in per_feature]
    return KeyedJaggedTensor(
        FEATURES,
        torch.cat(values),
        lengths=torch.cat(lengths),
        stride=sum(k.stride() for k in kjts),
    )


def plan_for(module: torch.nn.Module, types: tuple[str, ...], world: int) -> object:
    return construct_module_sharding_plan(
        module,
        {f"t{i}": generator_for(kind, i, world) for i, kind in enumerate(types)},
        world_size=world,
    )


def local_rows(sharded: torch.nn.Module, rank: int) -> dict[str, tuple]:
    """Per dynamic table: this rank's `(ids, rows of its columns, column blocks)`."""
    out = {}
    for t in sharded._tables:
        if t.config.dynamic is None:
            continue
        ids, slots = sharded.dynamic_tables.table(t.name).items()
        local = t.local(rank)
        if local is None:
            continue
        weight = getattr(sharded, sharded._prefix)[t.name].weight.detach()
        out[t.name] = (ids.clone(), weight[slots].clone(), local.column_blocks)
    return out


def train_sharded(ctx: RankContext, cases: list[Case]) -> list[tuple[dict, dict]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for case in cases:
        ebc = EmbeddingBagCollection(configs(case))
        spec = spec_of(case)
        sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
        sharded = sharder.shard(ebc, plan_for(ebc, case.types, ctx.world_size), env)
        dense = [
            p for n, p in sharded.named_parameters() if n not in sharded.fused_optimizer.params
        ]
        dense_opt = torch.optim.SGD(dense, lr=spec.learning_rate) if dense else None
        for step in range(STEPS):
            kjt, coefficients = batch(str(case), ctx.rank, step)
            (sharded(kjt).wait().values() * coefficients).sum().backward()
            if dense_opt is not None:
                dense_opt.step()
                dense_opt.zero_grad()
        results.append((local_rows(sharded, ctx.rank), sharded.dynamic_tables.stats()))
    return results


def reference(case: Case, world: int) -> FusedEmbeddingBagCollection:
    ref = FusedEmbeddingBagCollection(configs(case), spec_of(case))
    for step in range(STEPS):
        pairs = [batch(str(case), r, step) for r in range(world)]
        out = ref(concat_batches([k for k, _ in pairs]))
        (out.values() * torch.cat([c for _, c in pairs])).sum().backward()
    return ref


def check_against(ref: torch.nn.Module, per_rank: list[dict], what: str) -> None:
    for name in ("t0", "t1"):
        table = ref.dynamic_tables.table(name)
        ids, _slots = table.items()
        assert ids.numel() > 0, what
        weight = (ref.embedding_bags if hasattr(ref, "embedding_bags") else ref.embeddings)[
            name
        ].weight.detach()
        seen: set[int] = set()
        for rank_rows in per_rank:
            if name not in rank_rows:
                continue
            got_ids, rows, blocks = rank_rows[name]
            seen.update(got_ids.tolist())
            ref_slots = table.find(got_ids)
            assert bool((ref_slots >= 0).all()), f"{what} {name}: an id the reference lacks"
            expected = torch.cat([weight[ref_slots, c : c + n] for c, n in blocks], dim=1)
            assert_close(rows, expected, msg=f"{what} table {name}")
        assert seen == set(ids.tolist()), f"{what} {name}: sharded ids differ from the reference"


@pytest.mark.parametrize("world", [1, 2])
def test_sharded_dynamic_training_matches_unsharded(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(train_sharded, CASES)
    for c, case in enumerate(CASES):
        ref = reference(case, world)
        check_against(ref, [r[c][0] for r in per_rank], f"{case} world {world}")
        if case.types[0] == "row_wise":  # a partitioned map: admissions add up over ranks
            total = sum(r[c][1]["t0"]["admissions"] for r in per_rank)
            assert total == ref.dynamic_tables.table("t0").stats()["admissions"]


def test_row_wise_parts_split_the_id_space() -> None:
    ids = torch.randint(-(2**63), 2**63 - 1, (4000,), generator=seeded_generator("parts"))
    part = owner_part(ids, 2)
    assert set(part.tolist()) == {0, 1}
    assert 1800 < int((part == 0).sum()) < 2200  # balanced
    assert torch.equal(owner_part(ids, 2), part)  # a function of the id


# -- sequence (EmbeddingCollection) ----------------------------------------------------------


def ec_configs() -> list[EmbeddingConfig]:
    dyn = DynamicTableConfig(admission="THRESHOLD", admission_threshold=2)
    return [
        EmbeddingConfig(name="t0", num_embeddings=48, embedding_dim=4, feature_names=["f0"],
                        init_fn=_const, dynamic=dyn),
        EmbeddingConfig(name="t1", num_embeddings=64, embedding_dim=4, feature_names=["f1", "f2"],
                        init_fn=_const, dynamic=DynamicTableConfig()),
        EmbeddingConfig(name="t2", num_embeddings=6, embedding_dim=4, feature_names=["f3"],
                        init_fn=_const),
    ]  # fmt: skip


EC_TYPES = [("row_wise", "table_wise", "row_wise"), ("column_wise", "row_wise", "table_wise")]


def ec_loss(out: dict, scale: torch.Tensor) -> torch.Tensor:
    return sum((jt.values() * scale).sum() for jt in out.values())  # type: ignore[return-value]


def train_ec(ctx: RankContext, cases: list[tuple[str, ...]]) -> list[tuple[dict, list]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for types in cases:
        ec = EmbeddingCollection(ec_configs())
        sharder = EmbeddingCollectionSharder(
            fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1}
        )
        sharded = sharder.shard(ec, plan_for(ec, types, ctx.world_size), env)
        outs = []
        for step in range(STEPS):
            kjt, _ = batch(str(types), ctx.rank, step)
            out = sharded(kjt).wait()
            outs.append(
                {k: (v.values().detach().clone(), v.lengths().clone()) for k, v in out.items()}
            )
            ec_loss(out, torch.arange(1.0, 5.0)).backward()
        results.append((local_rows(sharded, ctx.rank), outs))
    return results


def test_sharded_dynamic_sequence_matches_unsharded(pool_factory):  # type: ignore[no-untyped-def]
    world = 2
    per_rank = pool_factory(world).run(train_ec, EC_TYPES)
    for c, types in enumerate(EC_TYPES):
        ref = EmbeddingCollection(ec_configs())
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(STEPS):
            kjts = [batch(str(types), r, step)[0] for r in range(world)]
            out = ref(concat_batches(kjts))
            for name, jt in out.items():  # each rank's output is its part of the whole batch
                start = 0
                for r in range(world):
                    got, lengths = per_rank[r][c][1][step][name]
                    n = int(lengths.sum())
                    assert_close(got, jt.values()[start : start + n], msg=f"{types} {name}")
                    start += n
            opt.zero_grad()
            ec_loss(out, torch.arange(1.0, 5.0)).backward()
            opt.step()
        check_against(ref, [r[c][0] for r in per_rank], str(types))


# -- bad input on every rank ------------------------------------------------------------------


def float_ids_on_rank_1(ctx: RankContext) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    case = CASES[0]
    ebc = EmbeddingBagCollection(configs(case))
    sharded = EmbeddingBagCollectionSharder().shard(
        ebc, plan_for(ebc, case.types, ctx.world_size), env
    )
    kjt, _ = batch("bad", ctx.rank, 0)
    if ctx.rank == 1:
        kjt = KeyedJaggedTensor(FEATURES, kjt.values().double(), lengths=kjt.lengths())
    try:
        sharded(kjt).wait()
    except (TypeError, PeerError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_bad_ids_raise_on_every_rank(pool_factory):  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(float_ids_on_rank_1)
    assert got[1].startswith("TypeError") and "dtype" in got[1], got
    assert got[0].startswith("PeerError"), got


# -- eviction: freed slots reset on the rank holding them; replicas stay identical --------------


def evicting(ctx: RankContext) -> list[tuple]:
    env = ShardingEnv.from_process_group(ctx.pg)
    small = [
        dataclasses.replace(c, num_embeddings=n, dynamic=DynamicTableConfig(eviction="LRU"))
        for c, n in zip(configs(CASES[0])[:2], (8, 6), strict=True)
    ] + configs(CASES[0])[2:]
    ebc = EmbeddingBagCollection(small)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.1}
    )
    types = ("row_wise", "data_parallel", "table_wise")
    sharded = sharder.shard(ebc, plan_for(ebc, types, ctx.world_size), env)
    dense = [p for n, p in sharded.named_parameters() if n not in sharded.fused_optimizer.params]
    opt = torch.optim.SGD(dense, lr=0.1)
    for step in range(6):
        kjt, coefficients = batch("evict", ctx.rank, step)
        (sharded(kjt).wait().values() * coefficients).sum().backward()
        opt.step()
        opt.zero_grad()
    stats = sharded.dynamic_tables.stats()
    # data_parallel replica: its map and rows, to compare across ranks
    dp = sharded.dynamic_tables.table("t1")
    replica = (dp.items()[0].clone(), sharded.embedding_bags["t1"].weight.detach().clone())
    # free every slot of the row-wise part: rows back to the init, Adagrad state to zero
    part = sharded.dynamic_tables.table("t0")
    _, slots = part.items()
    part.evict(slots)
    rows = sharded.embedding_bags["t0"].weight.detach()[slots]
    module, offset = sharded._lookup_modules_of("t0")[0]
    state = module.optimizer_state()["momentum1"][slots + offset]
    return [stats, replica, bool((rows == 0.05).all()), bool((state == 0).all()), slots.numel()]


def test_eviction_resets_rows_and_replicas_agree(pool_factory):  # type: ignore[no-untyped-def]
    results = pool_factory(2).run(evicting)
    assert sum(r[0]["t0"]["evictions"] for r in results) > 0  # the row-wise parts were full
    assert results[0][0]["t1"]["evictions"] > 0
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert torch.equal(a, b)  # replicated map: the same ids in the same slots, same rows
    for _, _, rows_reset, state_reset, freed in results:
        assert freed > 0 and rows_reset and state_reset
