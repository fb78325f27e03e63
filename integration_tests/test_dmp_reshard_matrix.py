"""Every pair of sharding types, across world sizes 1-4: a checkpoint saved under type `a` on
`S` ranks loads under type `b` on `W` ranks, and the outputs equal the unsharded model's.

To stay within the time budget each world size gets one `pool.run` that saves (one checkpoint
per type, all three tables of that type, each checkpoint with its own weights) and one that
loads (every saved type into every type, 36 loads). The pairs of world sizes are 2 -> 1,
3 -> 2, 4 -> 3 and 1 -> 4, so every world size is saved from and loaded into once, shrinking
and growing. Loading goes into a model initialized with other weights, so a load that skips a
shard shows. Checked on each rank: the gathered tables equal the saved model's, and the
sharded output on the rank's own batch equals the unsharded saved model's.
"""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, full_state_dict, load, save
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    ParameterShardingGenerator,
    ShardingPlan,
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

TABLES = [("t0", 11, 4, "f0"), ("t1", 7, 4, "f1"), ("t2", 9, 8, "f2")]
TYPES = [
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "table_column_wise",
    "data_parallel",
]
SOURCE_WORLD = {1: 2, 2: 3, 3: 4, 4: 1}  # load world -> the world its checkpoints come from


def generator_for(kind: str, index: int, world: int) -> ParameterShardingGenerator:
    local = 2 if world == 4 else world  # four ranks: two hosts of two
    host = index % 2 if world == 4 else 0
    if kind == "data_parallel":
        return data_parallel()
    if kind == "table_wise":
        return table_wise(rank=(index + 1) % world)
    if kind == "column_wise":
        return column_wise(ranks=[(index + k) % world for k in range(2)])
    if kind == "table_column_wise":
        return table_column_wise(ranks=[host * local + k % local for k in range(2)])
    if kind == "row_wise":
        return row_wise()
    assert kind == "table_row_wise"
    return table_row_wise(host_index=host)


def make_ebc(seed: str) -> EmbeddingBagCollection:
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f])
            for n, r, d, f in TABLES
        ]
    )
    g = seeded_generator("reshard-matrix", seed)
    with torch.no_grad():
        for p in ebc.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return ebc


def wrap(ctx: RankContext, seed: str, kind: str) -> DistributedModelParallel:
    ebc = make_ebc(seed)
    module_plan = construct_module_sharding_plan(
        ebc,
        {n: generator_for(kind, i, ctx.world_size) for i, (n, *_) in enumerate(TABLES)},
        world_size=ctx.world_size,
        local_world_size=2 if ctx.world_size == 4 else ctx.world_size,
    )
    return DistributedModelParallel(
        ebc, env=ShardingEnv.from_process_group(ctx.pg), plan=ShardingPlan(plan={"": module_plan})
    )


def make_kjt(rank: int) -> KeyedJaggedTensor:
    g = seeded_generator("reshard-matrix-batch", rank)
    size = rank % 3 + 2
    lengths = random_lengths(len(TABLES) * size, 3, g)
    per_key = lengths.view(len(TABLES), size).sum(1).tolist()
    values = torch.cat(
        [
            torch.randint(0, rows, (n,), generator=g)
            for (_, rows, _, _), n in zip(TABLES, per_key, strict=True)
        ]
    )
    return KeyedJaggedTensor([f for *_, f in TABLES], values, lengths=lengths, stride=size)


def save_every_type(ctx: RankContext, root: str) -> bool:
    for kind in TYPES:
        save(f"{root}/w{ctx.world_size}-{kind}", wrap(ctx, f"saved-{kind}", kind))
    return True


def load_every_pair(ctx: RankContext, root: str, source_world: int) -> int:
    kjt = make_kjt(ctx.rank)
    checked = 0
    for saved in TYPES:
        expected = make_ebc(f"saved-{saved}")
        want_tables = expected.state_dict()
        want_out = expected(kjt).values()
        for kind in TYPES:
            what = f"{saved}@{source_world} -> {kind}@{ctx.world_size}, rank {ctx.rank}"
            dmp = wrap(ctx, "target", kind)
            load(f"{root}/w{source_world}-{saved}", dmp)
            got = full_state_dict(dmp)
            for key, value in want_tables.items():
                assert torch.equal(got[key], value), f"{what}: {key}"
            out = dmp(kjt)
            assert_close(out.wait().values(), want_out, msg=what)
            checked += 1
    return checked


@pytest.mark.timeout(300)
def test_every_type_pair_reshards_across_world_sizes(
    pool_factory: object, tmp_path: object
) -> None:
    root = str(tmp_path)
    for world in (1, 2, 3, 4):
        assert all(pool_factory(world).run(save_every_type, root))  # type: ignore[operator]
    for world, source in SOURCE_WORLD.items():
        counts = pool_factory(world).run(load_every_pair, root, source)  # type: ignore[operator]
        assert counts == [len(TYPES) ** 2] * world
