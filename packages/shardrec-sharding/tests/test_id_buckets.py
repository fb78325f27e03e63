"""`total_num_buckets` routing of row-wise raw-id tables (shardrec_sharding.id_buckets).

References: a plain-Python model of TorchRec 1.8's rule as its row-wise input dist writes it
(`_calculate_rw_shard_sizes_and_offsets` for the shards, `RwSparseFeaturesDist` with
`_get_bucketize_row_pos` for the bucketization: block size ceil(space / world) when the
buckets divide by the world, the per-rank row positions otherwise; an id past the space, or
negative, read as unsigned and taken mod the world), fbgemm's own kernel when it is
installed, and the unsharded table (sharded training gives every id the same vector, bit for
bit, nothing evicted; each id sits on the rank the model names).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import shardrec_planner
from shardrec_collectives import ShardingEnv
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
from shardrec_sharding.id_buckets import bucket_bounds, bucket_part, buckets_per_part
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

U64 = 1 << 64


def torchrec_shard_rows(capacity: int, buckets: int, world: int) -> list[int]:
    """TorchRec's row-wise shard sizes of a table of `buckets` buckets (a plain loop)."""
    size = capacity // buckets
    return [size * (buckets // world + (1 if r < buckets % world else 0)) for r in range(world)]


def torchrec_rank(x: int, space: int, buckets: int, world: int) -> int:
    """The rank TorchRec's row-wise input dist sends id `x` to (module docstring)."""
    u = x % U64  # fbgemm reads the id as unsigned
    if buckets % world == 0:
        block = -(-space // world)
        return u // block if u < block * world else u % world
    block = -(-space // buckets)
    pos = [0]
    for r in range(world):
        pos.append(pos[-1] + (buckets // world + (1 if r < buckets % world else 0)) * block)
    if u >= pos[-1]:
        return u % world
    return next(r for r in range(world) if pos[r] <= u < pos[r + 1])


SHAPES = [  # (space, buckets, world)
    (20, 4, 4),
    (20, 5, 4),
    (40, 5, 2),
    (1 << 50, 1 << 10, 3),
    (5 * (1 << 40), 5, 2),
    (96, 12, 5),
    (7, 7, 7),
    (64, 8, 1),
]


def _ids(space: int, n: int, tag: str) -> torch.Tensor:
    g = seeded_generator("id-buckets", tag)
    inside = torch.randint(0, min(space, 2**62), (n,), generator=g) % space
    anywhere = torch.randint(-(2**63), 2**63 - 1, (n,), generator=g)
    edges = torch.tensor(
        [0, space - 1, min(space, 2**63 - 1), -1, -2, -(2**63), 2**63 - 1], dtype=torch.int64
    )
    return torch.cat([inside, anywhere, torch.randint(-50, 50, (n,), generator=g), edges])


@pytest.mark.parametrize(("space", "buckets", "world"), SHAPES)
def test_parts_follow_torchrec_formula(space: int, buckets: int, world: int) -> None:
    capacity = buckets * 3
    rows = torchrec_shard_rows(capacity, buckets, world)
    bounds = bucket_bounds("t", buckets, space, capacity, rows)
    assert [b * 3 for b in buckets_per_part(buckets, world)] == rows
    ids = _ids(space, 300, f"{space}-{buckets}-{world}")
    got = bucket_part(ids, bounds).tolist()
    want = [torchrec_rank(x, space, buckets, world) for x in ids.tolist()]
    assert got == want


@pytest.mark.parametrize(("space", "buckets", "world"), SHAPES)
def test_parts_match_fbgemm_kernel(space: int, buckets: int, world: int) -> None:
    """TorchRec's own kernel (fbgemm's block bucketization, as its row-wise input dist calls
    it for a virtual table), one id per bag."""
    fbgemm = pytest.importorskip("fbgemm_gpu")
    assert fbgemm is not None
    ids = _ids(space, 200, f"fbgemm-{space}-{buckets}-{world}")
    n = ids.numel()
    even = buckets % world == 0
    block = -(-space // (world if even else buckets))
    row_pos = None
    if not even:
        counts = buckets_per_part(buckets, world)
        row_pos = [torch.tensor([0, *(block * sum(counts[: r + 1]) for r in range(world))])]
    lengths = torch.ops.fbgemm.block_bucketize_sparse_features(
        torch.ones(n, dtype=torch.int64), ids, False, False, torch.tensor([block]), world,
        None, None, -1, row_pos,
    )[0]  # fmt: skip
    ranks = lengths.view(world, n).argmax(0)
    capacity = buckets * 2
    bounds = bucket_bounds(
        "t", buckets, space, capacity, torchrec_shard_rows(capacity, buckets, world)
    )
    assert torch.equal(bucket_part(ids, bounds), ranks)


def test_bounds_refuse_what_cannot_be_cut() -> None:
    with pytest.raises(ValueError, match=r"'t'.*total_num_buckets 2 is less than its 3 row-wise"):
        bucket_bounds("t", 2, 20, 20, [8, 6, 6])
    with pytest.raises(
        ValueError, match=r"'t'.*id space 21 is not a multiple of total_num_buckets 5"
    ):
        bucket_bounds("t", 5, 21, 20, [12, 8])
    with pytest.raises(
        ValueError, match=r"'t'.*capacity 21 is not a multiple of total_num_buckets 5"
    ):
        bucket_bounds("t", 5, 20, 21, [12, 9])
    with pytest.raises(
        ValueError, match=r"'t'.*hold \[10, 10\] rows, not whole buckets.*\[12, 8\]"
    ):
        bucket_bounds("t", 5, 20, 20, [10, 10])


def test_config_checks_id_space() -> None:
    dyn = DynamicTableConfig()
    with pytest.raises(ValueError, match=r"'t'.*id_space 64 is given without total_num_buckets"):
        EmbeddingBagConfig(name="t", num_embeddings=8, embedding_dim=4, id_space=64, dynamic=dyn)
    with pytest.raises(ValueError, match=r"'t'.*id_space 66 must be below 2\^63 and a multiple"):
        EmbeddingBagConfig(
            name="t", num_embeddings=8, embedding_dim=4, id_space=66, total_num_buckets=4,
            dynamic=dyn,
        )  # fmt: skip
    with pytest.raises(TypeError, match=r"'t'.*id_space must be an int"):
        EmbeddingBagConfig(
            name="t", num_embeddings=8, embedding_dim=4, id_space=64.0, total_num_buckets=4,
            dynamic=dyn,
        )  # fmt: skip


# -- sharded: every id on TorchRec's rank, the same vectors as unsharded ------------------------

SPACE = 15 << 40
STEPS = 3
POOL = 8


def _const(w: torch.Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)


def configs() -> list[EmbeddingBagConfig]:
    """`b`: 5 buckets (uneven on 2 and 3 ranks), `e`: 6 buckets, both over SPACE; `v`:
    TorchRec's virtual table of SPACE ids in 5 buckets, run as a raw-id table of 40 slots."""
    return [
        EmbeddingBagConfig(name="b", num_embeddings=40, embedding_dim=4, feature_names=["fb"],
                           init_fn=_const, total_num_buckets=5, id_space=SPACE,
                           dynamic=DynamicTableConfig(eviction="NONE")),
        EmbeddingBagConfig(name="e", num_embeddings=48, embedding_dim=8, feature_names=["fe"],
                           init_fn=_const, total_num_buckets=6, id_space=SPACE,
                           dynamic=DynamicTableConfig(eviction="NONE")),
        EmbeddingBagConfig(name="v", num_embeddings=SPACE, embedding_dim=4, feature_names=["fv"],
                           init_fn=_const, total_num_buckets=5, use_virtual_table=True,
                           dynamic=DynamicTableConfig(capacity=40)),
    ]  # fmt: skip


KEYS = ["fb", "fe", "fv"]


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = seeded_generator("id-buckets-batch", rank, step)
    pool = torch.cat(
        [
            torch.randint(0, SPACE, (POOL - 3,), generator=seeded_generator("id-buckets-pool")),
            torch.tensor([-1, -(2**63), SPACE + 3]),  # past the space: wrap mod the world
        ]
    )
    size = (rank + step) % 3 + 1
    lengths = random_lengths(len(KEYS) * size, 3, g)
    values = pool[torch.randint(0, POOL, (int(lengths.sum()),), generator=g)]
    kjt = KeyedJaggedTensor(KEYS, values, lengths=lengths, stride=size)
    return kjt, torch.randn(size, 16, generator=g)


SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)


def train_bucketed(ctx: RankContext) -> dict[str, tuple[list[int], torch.Tensor]]:
    ebc = EmbeddingBagCollection(configs())
    plan = construct_module_sharding_plan(
        ebc,
        {c.name: shardrec_planner.row_wise(num_buckets=c.total_num_buckets) for c in configs()},
        world_size=ctx.world_size,
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    sharded = sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))
    for step in range(STEPS):
        kjt, coefficients = batch(ctx.rank, step)
        (sharded(kjt).wait().values() * coefficients).sum().backward()
    out = {}
    for name in ("b", "e", "v"):
        ids, slots = sharded.dynamic_tables.table(name).items()
        out[name] = (ids.tolist(), sharded.embedding_bags[name].weight.detach()[slots].clone())
    return out


def concat(kjts: list[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    dicts = [k.to_dict() for k in kjts]
    return KeyedJaggedTensor(
        KEYS,
        torch.cat([d[f].values() for f in KEYS for d in dicts]),
        lengths=torch.cat([d[f].lengths() for f in KEYS for d in dicts]),
        stride=sum(k.stride() for k in kjts),
    )


@pytest.mark.parametrize("world", [1, 2, 3])
def test_bucketed_ids_land_on_torchrec_ranks_and_train_as_unsharded(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(train_bucketed)
    ref = FusedEmbeddingBagCollection(configs(), SPEC)
    for step in range(STEPS):
        pairs = [batch(r, step) for r in range(world)]
        out = ref(concat([k for k, _ in pairs])).values()
        (out * torch.cat([c for _, c in pairs])).sum().backward()
    for cfg in configs():
        name = cfg.name
        table = ref.dynamic_tables.table(name)
        weight = ref.embedding_bags[name].weight.detach()
        held: list[int] = []
        for rank, rows in enumerate(per_rank):
            ids, got = rows[name]
            held += ids
            for x in ids:  # on the rank TorchRec sends it to
                assert torchrec_rank(x, SPACE, cfg.total_num_buckets, world) == rank, (name, x)
            slots = table.find(torch.tensor(ids, dtype=torch.int64))
            assert torch.equal(got, weight[slots]), (name, rank)  # bit for bit
        assert sorted(held) == sorted(table.items()[0].tolist()), name
        if world > 1:
            assert sum(1 for rows in per_rank if rows[name][0]) > 1, name  # spread over ranks


def ec_configs() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(name=c.name, num_embeddings=c.num_embeddings, embedding_dim=4,
                        feature_names=c.feature_names, init_fn=_const,
                        total_num_buckets=c.total_num_buckets, id_space=c.id_space,
                        use_virtual_table=c.use_virtual_table, dynamic=c.dynamic)
        for c in configs()
    ]  # fmt: skip


def train_sequence(ctx: RankContext) -> tuple[list[dict], dict[str, list[int]]]:
    ec = EmbeddingCollection(ec_configs())
    plan = construct_module_sharding_plan(
        ec,
        {c.name: shardrec_planner.row_wise(num_buckets=c.total_num_buckets) for c in configs()},
        world_size=ctx.world_size,
    )
    sharder = EmbeddingCollectionSharder(fused_params=SPEC.to_fused_params())
    sharded = sharder.shard(ec, plan, ShardingEnv.from_process_group(ctx.pg))
    outs = []
    for step in range(STEPS):
        out = sharded(batch(ctx.rank, step)[0]).wait()
        outs.append({k: v.values().detach().clone() for k, v in out.items()})
        sum((v.values() * (i + 1)).sum() for i, v in enumerate(out.values())).backward()
    held = {c.name: sharded.dynamic_tables.table(c.name).items()[0].tolist() for c in configs()}
    return outs, held


def test_bucketed_sequence_tables_match_unsharded(pool_factory):  # type: ignore[no-untyped-def]
    world = 2
    per_rank = pool_factory(world).run(train_sequence)
    ref = EmbeddingCollection(ec_configs())
    opt = torch.optim.SGD(ref.parameters(), lr=SPEC.learning_rate)
    for step in range(STEPS):
        out = ref(concat([batch(r, step)[0] for r in range(world)]))
        for key, jt in out.items():  # each rank's output: its samples of the whole batch
            got = torch.cat([per_rank[r][0][step][key] for r in range(world)])
            # torch.optim.SGD on dense gradients vs the fused update: the same to rounding
            assert_close(got, jt.values().detach(), msg=f"{key} step {step}")
        opt.zero_grad()
        sum((v.values() * (i + 1)).sum() for i, v in enumerate(out.values())).backward()
        opt.step()
    for cfg in configs():
        for rank in range(world):
            for x in per_rank[rank][1][cfg.name]:
                assert torchrec_rank(x, SPACE, cfg.total_num_buckets, world) == rank


def shard_badly(ctx: RankContext, buckets: int, give_buckets: bool) -> str:
    cfg = dataclasses.replace(configs()[0], total_num_buckets=buckets)
    ebc = EmbeddingBagCollection([cfg])
    gen = shardrec_planner.row_wise(num_buckets=buckets if give_buckets else None)
    try:
        if give_buckets:  # the plan helper refuses first: build the plan by hand
            gen = shardrec_planner.row_wise()
        plan = construct_module_sharding_plan(ebc, {"b": gen}, world_size=ctx.world_size)
        EmbeddingBagCollectionSharder().shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))
    except ValueError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize(
    ("buckets", "match"),
    [(1, "total_num_buckets 1 is less than its 2 row-wise shards"), (5, "not whole buckets")],
)
def test_unroutable_buckets_raise_on_every_rank(pool_factory, buckets, match):  # type: ignore[no-untyped-def]
    for message in pool_factory(2).run(shard_badly, buckets, buckets == 1):
        assert "'b'" in message and match in message, message


def table_row_wise_routing(ctx: RankContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ebc = EmbeddingBagCollection([configs()[0]])  # 5 buckets: not whole blocks on 2 ranks
    gen = shardrec_planner.table_row_wise(host_index=0)
    plan = construct_module_sharding_plan(
        ebc, {"b": gen}, world_size=ctx.world_size, local_size=ctx.world_size
    )
    sharded = EmbeddingBagCollectionSharder().shard(
        ebc, plan, ShardingEnv.from_process_group(ctx.pg)
    )
    routing = sharded.dynamic_tables.table("b").routing
    return routing.owners, routing.bounds


def test_table_row_wise_keeps_the_hash(pool_factory):  # type: ignore[no-untyped-def]
    # TorchRec's table-row-wise input dist has no bucket path: ids go by our routing hash
    for owners, bounds in pool_factory(2).run(table_row_wise_routing):
        assert owners == (0, 1) and bounds == ()


def test_plan_helper_and_planner_refuse_fewer_buckets_than_ranks() -> None:
    ebc = EmbeddingBagCollection([dataclasses.replace(configs()[0], total_num_buckets=2)])
    with pytest.raises(ValueError, match=r"total_num_buckets 2 is less than the world size 3"):
        construct_module_sharding_plan(
            ebc, {"b": shardrec_planner.row_wise(num_buckets=2)}, world_size=3
        )
    assert math.gcd(5, 2) == 1  # the uneven shapes above are truly uneven
