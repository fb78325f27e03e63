"""Fused training: after K steps the sharded tables equal a single-process fused module trained on
the concatenation of every rank's batches (the sum of the ranks' losses).

The sharded tables are gathered through `state_dict()` (each rank returns its ShardedTensor's
local shards with their offsets), which also checks the shard metadata.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _sharding_placements import generator_for

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import (
    EmbOptimType,
    FusedOptimSpec,
    apply_optimizer_in_backward,
    fused_spec_from_optimizer,
)
from shardrec_planner import construct_module_sharding_plan, data_parallel
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator
from shardrec_testing.random_ids import random_ids

TABLES = [("t0", 11, 8, ["f0"]), ("t1", 7, 4, ["f1", "f2"]), ("t2", 5, 8, ["f0"])]
FEATURES = ["f0", "f1", "f2"]
STEPS = 3


@dataclasses.dataclass(frozen=True)
class Case:
    types: tuple[str, str, str]
    optimizer: str
    pooling: str = "SUM"
    weighted: bool = False
    in_backward: bool = False  # choose the optimizer with apply_optimizer_in_backward
    dense: bool = False  # plan kernel "dense": local shards get .grad, torch.optim.SGD steps

    def __str__(self) -> str:
        return f"{'/'.join(self.types)}-{self.optimizer}-{self.pooling}-w{int(self.weighted)}"


CASES = [
    Case(("table_wise",) * 3, "exact_row_wise_adagrad"),
    Case(("row_wise",) * 3, "exact_row_wise_adagrad", "MEAN"),
    Case(("table_row_wise",) * 3, "adam", weighted=True),
    Case(("column_wise",) * 3, "exact_adagrad", "MEAN"),
    Case(("table_column_wise",) * 3, "adam"),
    Case(("data_parallel", "row_wise", "table_wise"), "exact_sgd", weighted=True),
    Case(("row_wise", "column_wise", "table_wise"), "exact_adagrad", in_backward=True),
    Case(("row_wise", "column_wise", "table_row_wise"), "exact_sgd", "MEAN", dense=True),
]


def spec_of(case: Case) -> FusedOptimSpec:
    if case.in_backward:
        return fused_spec_from_optimizer(torch.optim.Adagrad, {"lr": 0.1})
    return FusedOptimSpec(optimizer=EmbOptimType(case.optimizer), learning_rate=0.1)


def configs(case: Case) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=n, num_embeddings=r, embedding_dim=d, feature_names=f, pooling=case.pooling
        )
        for n, r, d, f in TABLES
    ]


def initial_weights(case: Case) -> dict[str, torch.Tensor]:
    g = seeded_generator("train-weights", str(case))
    return {n: torch.randn(r, d, generator=g) for n, r, d, _ in TABLES}


def batch(case: Case, rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    """Rank `rank`'s batch of `step` and the coefficients of its loss `(B, sum dims)`."""
    g = seeded_generator("train-batch", str(case), rank, step)
    size = (rank + step) % 3 + 1
    # Few distinct ids: duplicates within and across ranks exercise the row aggregation.
    lengths, values = random_ids({"f0": 5, "f1": 7, "f2": 7}, size, 4, g)
    weights = torch.rand(values.numel(), generator=g) if case.weighted else None
    coefficients = torch.randn(size, 8 + 4 + 4 + 8, generator=g)
    return KeyedJaggedTensor(FEATURES, values, weights, lengths, stride=size), coefficients


def concat_batches(kjts: list[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    """One KJT whose batch is every rank's batch, rank 0's samples first."""
    per_feature = [kjt.to_dict() for kjt in kjts]
    values, lengths, weights = [], [], []
    for f in FEATURES:
        for d in per_feature:
            values.append(d[f].values())
            weights.append(d[f].weights_or_none())
        for d in per_feature:
            lengths.append(d[f].lengths())
    w = None if weights[0] is None else torch.cat([x for x in weights if x is not None])
    return KeyedJaggedTensor(
        FEATURES,
        torch.cat(values),
        w,
        torch.cat(lengths),
        stride=sum(k.stride() for k in kjts),
    )


def train_sharded(ctx: RankContext, cases: list[Case]) -> list[dict[str, list[tuple]]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for case in cases:
        ebc = EmbeddingBagCollection(configs(case), is_weighted=case.weighted)
        with torch.no_grad():
            for n, w in initial_weights(case).items():
                ebc.embedding_bags[n].weight.copy_(w)
        spec = spec_of(case)
        if case.in_backward:
            apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.1})
            sharder = EmbeddingBagCollectionSharder()
        else:
            sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
        plan = construct_module_sharding_plan(
            ebc,
            {
                n: generator_for(case.types[i], i, ctx.world_size, "dense" if case.dense else None)
                for i, (n, *_) in enumerate(TABLES)
            },
            world_size=ctx.world_size,
            local_world_size=2 if ctx.world_size == 4 else ctx.world_size,
        )
        sharded = sharder.shard(ebc, plan, env)
        fused_keys = set(sharded.fused_optimizer.params)
        for name in dict(sharded.named_parameters()):
            dense_table = case.dense or case.types[int(name.split(".")[1][1])] == "data_parallel"
            assert (name in fused_keys) != dense_table, name
        dense = [p for n, p in sharded.named_parameters() if n not in fused_keys]
        dense_opt = torch.optim.SGD(dense, lr=spec.learning_rate) if dense else None
        for step in range(STEPS):
            kjt, coefficients = batch(case, ctx.rank, step)
            out = sharded(kjt).wait()
            (out.values() * coefficients).sum().backward()
            if dense_opt is not None:
                dense_opt.step()
                dense_opt.zero_grad()
        shards: dict[str, list[tuple]] = {}
        for key, value in sharded.state_dict().items():
            table = key.split(".")[1]
            if isinstance(value, torch.Tensor) and not hasattr(value, "local_shards"):
                shards[table] = [((0, 0), tuple(value.shape), value.clone())]
            else:
                shards[table] = [
                    (
                        tuple(s.metadata.shard_offsets),
                        tuple(s.metadata.shard_sizes),
                        s.tensor.clone(),
                    )
                    for s in value.local_shards()
                ]
        results.append(shards)
    return results


def reference_tables(case: Case, world: int) -> dict[str, torch.Tensor]:
    ref = FusedEmbeddingBagCollection(configs(case), spec_of(case), is_weighted=case.weighted)
    with torch.no_grad():
        for n, w in initial_weights(case).items():
            ref.embedding_bags[n].weight.copy_(w)
    for step in range(STEPS):
        pairs = [batch(case, r, step) for r in range(world)]
        out = ref(concat_batches([k for k, _ in pairs]))
        (out.values() * torch.cat([c for _, c in pairs])).sum().backward()
    return {n: ref.embedding_bags[n].weight.detach() for n, *_ in TABLES}


# Worlds 3 and 4 run in integration_tests/test_sharding_scenarios.py (same functions).
WORLDS = (1, 2)


@pytest.mark.parametrize("world", WORLDS)
def test_fused_training_matches_single_process(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(train_sharded, CASES)
    for c, case in enumerate(CASES):
        expected = reference_tables(case, world)
        for name, full in expected.items():
            got = torch.full_like(full, float("nan"))
            covered = torch.zeros_like(full, dtype=torch.bool)
            for rank_result in per_rank:
                for (r0, c0), (nr, nc), tensor in rank_result[c][name]:
                    got[r0 : r0 + nr, c0 : c0 + nc] = tensor
                    covered[r0 : r0 + nr, c0 : c0 + nc] = True
            assert covered.all(), (str(case), name)
            assert_close(got, full, scale=10, msg=f"{case} table {name}")


def data_parallel_grads(ctx: RankContext, rows: int) -> torch.Tensor:
    """The summed dense gradient of a replicated table after one backward on each rank."""
    env = ShardingEnv.from_process_group(ctx.pg)
    config = EmbeddingBagConfig(
        name="big", num_embeddings=rows, embedding_dim=4, feature_names=["f"]
    )
    ebc = EmbeddingBagCollection([config])
    plan = construct_module_sharding_plan(ebc, {"big": data_parallel()}, world_size=ctx.world_size)
    sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)
    kjt, coefficients = dp_batch(ctx.rank, rows)
    (sharded(kjt).wait().values() * coefficients).sum().backward()
    grad = sharded.embedding_bags["big"].weight.grad
    assert grad is not None
    return grad.clone()


def dp_batch(rank: int, rows: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = seeded_generator("dp-grads", rank)
    lengths = random_lengths(3, 4, g)
    values = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    return KeyedJaggedTensor(["f"], values, lengths=lengths), torch.randn(3, 4, generator=g)


@pytest.mark.parametrize("rows", [1000, 6], ids=["row-sparse-exchange", "dense-all-reduce"])
def test_data_parallel_gradients_are_summed_over_ranks(pool_factory, rows):  # type: ignore[no-untyped-def]
    grads = pool_factory(2).run(data_parallel_grads, rows)
    config = EmbeddingBagConfig(
        name="big", num_embeddings=rows, embedding_dim=4, feature_names=["f"]
    )
    ebc = EmbeddingBagCollection([config])
    for rank in range(2):
        kjt, coefficients = dp_batch(rank, rows)
        (ebc(kjt).values() * coefficients).sum().backward()
    expected = ebc.embedding_bags["big"].weight.grad
    assert expected is not None
    for grad in grads:
        assert_close(grad, expected)
    assert torch.equal(grads[0], grads[1])  # replicas stay identical
