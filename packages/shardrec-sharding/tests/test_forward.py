"""Sharded EmbeddingBagCollection forward equals the unsharded module's, scenario by scenario.

Scenarios are data (`CASES`): sharding type x pooling x weighted x mixed plans, each run on
world sizes 1-4 with uneven tables (rows not divisible by the world), empty bags and a batch
size that differs per rank (one rank may have an empty batch). One `pool.run` per world size
runs every case, so the whole file costs four round trips to the shared rank pools.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _sharding_placements import generator_for

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

# t0 and t2 both read f0 (keys f0@t0, f0@t2); t1 reads two features. Rows 11, 7, 5: uneven
# on every world size > 1.
TABLES = [("t0", 11, 8, ["f0"]), ("t1", 7, 4, ["f1", "f2"]), ("t2", 5, 8, ["f0"])]
FEATURES = ["f0", "f1", "f2", "unused"]


@dataclasses.dataclass(frozen=True)
class Case:
    types: tuple[str, str, str]  # sharding type of t0, t1, t2
    pooling: str = "SUM"
    weighted: bool = False
    meta: bool = False  # shard a module built on "meta" (shards initialized per table config)

    def __str__(self) -> str:
        w = "-weighted" if self.weighted else ""
        return f"{'/'.join(self.types)}-{self.pooling}{w}"


ALL = ["data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise"]
ALL += ["table_row_wise"]
CASES = [
    *(Case((t, t, t), p) for t in ALL for p in ("SUM", "MEAN")),
    *(Case((t, t, t), "SUM", True) for t in ALL),
    Case(("row_wise", "table_wise", "column_wise")),
    Case(("column_wise", "data_parallel", "row_wise"), "MEAN"),
    Case(("table_row_wise", "row_wise", "table_wise"), "SUM", True),
]


def build_ebc(case: Case) -> EmbeddingBagCollection:
    configs = [
        EmbeddingBagConfig(
            name=n, num_embeddings=r, embedding_dim=d, feature_names=f, pooling=case.pooling
        )
        for n, r, d, f in TABLES
    ]
    ebc = EmbeddingBagCollection(configs, is_weighted=case.weighted)
    g = seeded_generator("weights", str(case))
    with torch.no_grad():
        for n, _, _, _ in TABLES:
            w = ebc.embedding_bags[n].weight
            w.copy_(torch.randn(w.shape, generator=g))
    return ebc


def plan_for(ebc: EmbeddingBagCollection, case: Case, world: int) -> dict[str, object]:
    local = 2 if world == 4 else world
    return dict(
        construct_module_sharding_plan(
            ebc,
            {n: generator_for(case.types[i], i, world) for i, (n, _, _, _) in enumerate(TABLES)},
            world_size=world,
            local_world_size=local,
        )
    )


def batch(case: Case, rank: int, step: int = 0) -> KeyedJaggedTensor:
    """This rank's batch: size 0-4 depending on rank, some empty bags."""
    g = seeded_generator("batch", str(case), rank, step)
    size = (rank * 3 + step + 2) % 5
    lengths = random_lengths(len(FEATURES) * size, 3, g)
    per_key = lengths.view(len(FEATURES), size).sum(1).tolist() if size else [0] * 4
    limits = {"f0": 5, "f1": 7, "f2": 7, "unused": 100}
    values = torch.cat(
        [
            torch.randint(0, limits[f], (n,), generator=g)
            for f, n in zip(FEATURES, per_key, strict=True)
        ]
    )
    weights = torch.rand(values.numel(), generator=g) if case.weighted else None
    return KeyedJaggedTensor(FEATURES, values, weights=weights, lengths=lengths, stride=size)


def forward_cases(ctx: RankContext, cases: list[Case]) -> int:
    env = ShardingEnv.from_process_group(ctx.pg)
    for case in cases:
        ebc = build_ebc(case)
        plan = plan_for(ebc, case, ctx.world_size)
        sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)  # type: ignore[arg-type]
        for step in range(2):
            kjt = batch(case, ctx.rank, step)
            expected = ebc(kjt)
            got = sharded(kjt).wait()
            assert got.keys() == expected.keys(), (str(case), got.keys(), expected.keys())
            assert_close(got.values(), expected.values(), msg=f"{case} step {step}")
    return len(cases)


def variable_batch(case: Case, rank: int) -> tuple[KeyedJaggedTensor, KeyedJaggedTensor]:
    """A KJT with a batch size per feature plus inverse_indices, and its expansion to one batch
    size built by a plain Python loop (the reference input of the unsharded module)."""
    g = seeded_generator("vbe", str(case), rank)
    batch = rank + 2
    strides = [int(x) for x in torch.randint(1, batch + 1, (len(FEATURES),), generator=g)]
    inverse = torch.stack([torch.randint(0, s, (batch,), generator=g) for s in strides])
    limits = {"f0": 5, "f1": 7, "f2": 7, "unused": 100}
    bags = [
        [
            torch.randint(0, limits[f], (int(torch.randint(0, 4, (), generator=g)),), generator=g)
            for _ in range(s)
        ]
        for f, s in zip(FEATURES, strides, strict=True)
    ]
    bag_weights = [[torch.rand(b.numel(), generator=g) for b in fb] for fb in bags]
    flat = [b for fb in bags for b in fb]
    flat_w = [w for fw in bag_weights for w in fw]
    vbe = KeyedJaggedTensor(
        FEATURES,
        torch.cat(flat),
        weights=torch.cat(flat_w) if case.weighted else None,
        lengths=torch.tensor([b.numel() for b in flat]),
        stride_per_key_per_rank=[[s] for s in strides],
        inverse_indices=(FEATURES, inverse),
    )
    picked = [(bags[f][int(i)], bag_weights[f][int(i)]) for f in range(4) for i in inverse[f]]
    expanded = KeyedJaggedTensor(
        FEATURES,
        torch.cat([b for b, _ in picked]),
        weights=torch.cat([w for _, w in picked]) if case.weighted else None,
        lengths=torch.tensor([b.numel() for b, _ in picked]),
        stride=batch,
    )
    return vbe, expanded


def variable_batch_cases(ctx: RankContext, cases: list[Case]) -> int:
    """Variable batch per feature: the output is the unsharded module's on the expanded batch
    (TorchRec's inverse_indices contract), for pooled tables of every sharding type."""
    env = ShardingEnv.from_process_group(ctx.pg)
    for case in cases:
        ebc = build_ebc(case)
        plan = plan_for(ebc, case, ctx.world_size)
        sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)  # type: ignore[arg-type]
        vbe, expanded = variable_batch(case, ctx.rank)
        assert_close(sharded(vbe).wait().values(), ebc(expanded).values(), msg=str(case))
    return len(cases)


VBE_CASES = [Case((t, t, t), "SUM", t != "column_wise") for t in ALL]


# Worlds 3 and 4 run in integration_tests/test_sharding_scenarios.py (same functions).
WORLDS = (1, 2)


@pytest.mark.parametrize("world", WORLDS)
def test_forward_equals_unsharded(pool_factory, world):  # type: ignore[no-untyped-def]
    done = pool_factory(world).run(forward_cases, CASES)
    assert done == [len(CASES)] * world
    done = pool_factory(world).run(variable_batch_cases, VBE_CASES)
    assert done == [len(VBE_CASES)] * world
