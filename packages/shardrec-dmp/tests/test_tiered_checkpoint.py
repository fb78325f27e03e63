"""Checkpoints of tiered tables (rows on disk behind a cache) through `save` / `load`,
against the same tables held in memory as the reference.

A model with a tiered table ("big", kernel key_value, a cache of a quarter of its rows: ids
drift every step, so rows are evicted every step) and an in-memory one ("small"). Saved
tiered and loaded in memory, saved in memory and loaded tiered, saved tiered and resumed
tiered: training continues bit for bit as the uninterrupted in-memory run (one rank), and as
close as the summation order allows across world sizes (2 -> 1, 1 -> 2 gloo ranks).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, full_state_dict, load, save, verify
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

FEATURES = ["f", "g"]
ROWS = {"big": 48, "small": 20}
DIM = 4
STEPS = 6
RANKS = 2  # the global batch of a step is the two ranks' batches


def configs() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=DIM, feature_names=[f])
        for (n, r), f in zip(ROWS.items(), FEATURES, strict=True)
    ]


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)  # the same initial tables for every kind and world size
        self.sparse = EmbeddingBagCollection(configs())

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out = self.sparse(kjt).values()  # the same coefficients for every sample, any world
        return (out * torch.linspace(-1, 1, out.shape[1])).sum()


def part(rank: int, step: int) -> tuple[Tensor, Tensor]:
    """(lengths, values) of one rank's batch: 2 samples, ids drifting with the step."""
    g = seeded_generator("tiered-dmp", rank, step)
    lengths = random_lengths(2 * len(FEATURES), 3, g)
    per_feature = lengths.view(len(FEATURES), 2).sum(1).tolist()
    values = [
        (torch.randint(0, 5, (n,), generator=g) + step * 7 + rank * 3) % ROWS[name]
        for n, name in zip(per_feature, ROWS, strict=True)
    ]
    return lengths, torch.cat(values)


def batch(ctx: RankContext, step: int) -> KeyedJaggedTensor:
    """This rank's batch: its part on 2 ranks; both parts, feature by feature, on one."""
    ranks = [ctx.rank] if ctx.world_size == RANKS else list(range(RANKS))
    parts = [part(r, step) for r in ranks]
    lengths, values = [], []
    for f in range(len(FEATURES)):
        for ls, vs in parts:
            per = ls.view(len(FEATURES), 2)
            start = int(per[:f].sum())
            lengths.append(per[f])
            values.append(vs[start : start + int(per[f].sum())])
    return KeyedJaggedTensor(FEATURES, torch.cat(values), lengths=torch.cat(lengths))


def wrap(ctx: RankContext, kind: str, store: str, optimizer: EmbOptimType) -> DistributedModelParallel:
    """kind: "tiered" (big on key_value) or "memory"; big on the last rank, small row_wise."""
    model = Model()
    kernel = "key_value" if kind == "tiered" else None
    last = ctx.world_size - 1
    module_plan = construct_module_sharding_plan(
        model.sparse,
        {"big": table_wise(rank=last, compute_kernel=kernel), "small": row_wise()},
        world_size=ctx.world_size,
    )
    if kind == "tiered":
        module_plan["big"] = dataclasses.replace(
            module_plan["big"],
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            cache_params=CacheParams(load_factor=0.25),
        )
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.05)
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": module_plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
    )


def train(ctx: RankContext, dmp: DistributedModelParallel, first: int, last: int) -> None:
    for step in range(first, last):
        dmp(batch(ctx, step)).backward()
        dmp.fused_optimizer.step()


def tables(dmp: DistributedModelParallel) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in full_state_dict(dmp).items()}


def round_trips(ctx: RankContext, root: str, optimizer: EmbOptimType) -> dict[str, object]:
    """One rank: reference, and three save / load / continue paths."""
    store = os.path.join(root, f"store-{optimizer.name}")
    reference = wrap(ctx, "memory", store, optimizer)
    train(ctx, reference, 0, STEPS)
    out: dict[str, object] = {"reference": tables(reference)}
    half = STEPS // 2
    for saved, loaded in [("tiered", "memory"), ("memory", "tiered"), ("tiered", "tiered")]:
        path = os.path.join(root, f"ckpt-{optimizer.name}-{saved}-{loaded}")
        first = wrap(ctx, saved, store + "-a", optimizer)
        train(ctx, first, 0, half)
        save(path, first, {"fused": first.fused_optimizer})
        again = wrap(ctx, loaded, store + "-b", optimizer)
        train(ctx, again, 0, 1)  # state (and dirty cached rows) the load must replace
        load(path, again, {"fused": again.fused_optimizer})
        train(ctx, again, half, STEPS)
        out[f"{saved}->{loaded}"] = tables(again)
    return out


@pytest.mark.parametrize(
    "optimizer",
    [EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ADAM, EmbOptimType.EXACT_ADAGRAD],
    ids=lambda o: o.name,
)
def test_tiered_and_in_memory_checkpoints_interchange_bit_for_bit(
    pool_factory, tmp_path, optimizer
):  # type: ignore[no-untyped-def]
    (result,) = pool_factory(1).run(round_trips, str(tmp_path), optimizer)
    reference = result.pop("reference")
    assert set(result) == {"tiered->memory", "memory->tiered", "tiered->tiered"}
    for case, got in result.items():
        assert got.keys() == reference.keys()
        for key in reference:
            assert torch.equal(got[key], reference[key]), (case, key)


def save_half(ctx: RankContext, root: str, kind: str) -> bool:
    dmp = wrap(ctx, kind, os.path.join(root, "store-save"), EmbOptimType.EXACT_ROWWISE_ADAGRAD)
    train(ctx, dmp, 0, STEPS // 2)
    save(os.path.join(root, "ckpt"), dmp, {"fused": dmp.fused_optimizer})
    return True


def load_and_finish(ctx: RankContext, root: str, kind: str) -> dict[str, Tensor]:
    dmp = wrap(ctx, kind, os.path.join(root, "store-load"), EmbOptimType.EXACT_ROWWISE_ADAGRAD)
    load(os.path.join(root, "ckpt"), dmp, {"fused": dmp.fused_optimizer})
    train(ctx, dmp, STEPS // 2, STEPS)
    return tables(dmp)


def straight(ctx: RankContext, root: str) -> dict[str, Tensor]:
    dmp = wrap(ctx, "memory", os.path.join(root, "unused"), EmbOptimType.EXACT_ROWWISE_ADAGRAD)
    train(ctx, dmp, 0, STEPS)
    return tables(dmp)


@pytest.mark.parametrize(
    ("saved_world", "saved", "loaded_world", "loaded"),
    [(2, "tiered", 1, "memory"), (2, "tiered", 1, "tiered"), (1, "tiered", 2, "tiered"),
     (1, "memory", 2, "tiered")],
)  # fmt: skip
def test_tiered_checkpoints_reshard_across_world_sizes(
    pool_factory, tmp_path, saved_world, saved, loaded_world, loaded
):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    assert all(pool_factory(saved_world).run(save_half, root, saved))
    assert verify(os.path.join(root, "ckpt")) > 0
    got = pool_factory(loaded_world).run(load_and_finish, root, loaded)
    (want,) = pool_factory(1).run(straight, root)
    for per_rank in got:
        assert per_rank.keys() == want.keys()
        for key in want:
            assert_close(per_rank[key], want[key], msg=key)
