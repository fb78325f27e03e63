"""Sharded EmbeddingCollection: forward equals the unsharded module's, and fused exact SGD
training equals torch.optim.SGD on the unsharded module over every rank's batch."""

from __future__ import annotations

import pytest
import torch
from _sharding_placements import generator_for

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan
from shardrec_sharding import EmbeddingCollectionSharder
from shardrec_testing import RankContext, assert_close, seeded_generator
from shardrec_testing.placements import local_world_size
from shardrec_testing.random_ids import random_ids

# s0 and s2 both read f0; rows uneven on every world > 1.
TABLES = [("s0", 11, 4, ["f0"]), ("s1", 7, 4, ["f1", "f2"]), ("s2", 5, 4, ["f0"])]
FEATURES = ["f0", "f1", "f2"]
KINDS = ["data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise"]
KINDS += ["table_row_wise"]
CASES = [(k, k, k) for k in KINDS] + [("row_wise", "column_wise", "data_parallel")]
LR = 0.1
STEPS = 2


def build_ec() -> EmbeddingCollection:
    ec = EmbeddingCollection(
        [
            EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
            for n, r, d, f in TABLES
        ],
        need_indices=True,
    )
    g = seeded_generator("ec-weights")
    with torch.no_grad():
        for p in ec.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return ec


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = seeded_generator("ec-batch", rank, step)
    size = (rank + step) % 3 + 1
    lengths, values = random_ids({"f0": 5, "f1": 7, "f2": 7}, size, 3, g)
    # per id of each output key (f0@s0, f1, f2, f0@s2): one coefficient row of the loss
    f0_ids = int(lengths[:size].sum())
    coefficients = torch.randn(int(lengths.sum()) + f0_ids, 4, generator=g)
    return KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=size), coefficients


def loss_of(out: dict[str, object], coefficients: torch.Tensor) -> torch.Tensor:
    rows = torch.cat([out[k].values() for k in ("f0@s0", "f1", "f2", "f0@s2")])  # type: ignore[attr-defined]
    return (rows * coefficients).sum()


def sequence_cases(ctx: RankContext) -> list[dict[str, torch.Tensor]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for case in CASES:
        ec = build_ec()
        plan = construct_module_sharding_plan(
            ec,
            {n: generator_for(case[i], i, ctx.world_size) for i, (n, *_) in enumerate(TABLES)},
            world_size=ctx.world_size,
            local_world_size=local_world_size(ctx.world_size),
        )
        sharder = EmbeddingCollectionSharder({"optimizer": "exact_sgd", "learning_rate": LR})
        sharded = sharder.shard(ec, plan, env)
        dense = [
            p for n, p in sharded.named_parameters() if n not in sharded.fused_optimizer.params
        ]
        opt = torch.optim.SGD(dense, lr=LR) if dense else None
        for step in range(STEPS):
            kjt, coefficients = batch(ctx.rank, step)
            got = sharded(kjt).wait()
            with torch.no_grad():
                expected = ec(kjt)
            assert list(got) == list(expected), (case, list(got), list(expected))
            for key, jt in expected.items():
                if step == 0:
                    assert_close(got[key].values(), jt.values(), msg=f"{case} {key}")
                assert torch.equal(got[key].lengths(), jt.lengths())
                assert torch.equal(got[key].weights(), jt.weights())  # need_indices
            loss_of(got, coefficients).backward()
            if opt is not None:
                opt.step()
                opt.zero_grad()
        tables: dict[str, torch.Tensor] = {}
        for key, value in sharded.state_dict().items():
            name = key.split(".")[1]
            full = torch.full((dict((n, r) for n, r, *_ in TABLES)[name], 4), float("nan"))
            if hasattr(value, "local_shards"):
                for s in value.local_shards():
                    (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
                    full[r0 : r0 + nr, c0 : c0 + nc] = s.tensor
            else:
                full = value.clone()
            tables[name] = full
        results.append(tables)
    return results


# Worlds 3 and 4 run in integration_tests/test_sharding_scenarios.py (same functions).
WORLDS = (1, 2)


@pytest.mark.parametrize("world", WORLDS)
def test_sharded_embedding_collection(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(sequence_cases)
    ref = build_ec()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for step in range(STEPS):
        total = torch.zeros(())
        for r in range(world):
            kjt, coefficients = batch(r, step)
            total = total + loss_of(ref(kjt), coefficients)
        total.backward()
        opt.step()
        opt.zero_grad()
    for c, case in enumerate(CASES):
        for name, *_ in TABLES:
            got = torch.full_like(ref.embeddings[name].weight, float("nan"))
            for rank_result in per_rank:
                part = rank_result[c][name]
                got = torch.where(torch.isnan(part), got, part)
            assert_close(got, ref.embeddings[name].weight.detach(), msg=f"{case} {name}")
