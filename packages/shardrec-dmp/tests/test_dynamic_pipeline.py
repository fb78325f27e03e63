"""Dynamic (raw-id) tables under the train pipelines, with a capacity smaller than two batches'
ids (slots evicted on every step, some of them used by the batch before, whose backward has not
run when the pipeline maps the next batch): the pipelines give exactly the weights, optimizer
state and id maps of the plain loop (forward, backward, step per batch), on 1 and 2 gloo ranks.

And a second training forward before the first one's backward (gradient accumulation) cannot
evict the slots the pending backward updates (unsharded and sharded)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

import shardrec_planner
from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    DistributedModelParallel,
    PrefetchTrainPipelineSparseDist,
    TrainPipelineSparseDist,
)
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import ShardingPlan, construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection
from shardrec_testing import RankContext, random_lengths, seeded_generator
from shardrec_testing.placements import placement_kwargs

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
STEPS = 8
BATCH = 4
CAPACITY = 8  # per table; a batch brings up to 12 ids of a pool of 40


def configs(eviction: str) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="user", num_embeddings=CAPACITY, embedding_dim=4,
                           feature_names=["u"], dynamic=DynamicTableConfig(eviction=eviction)),
        EmbeddingBagConfig(name="item", num_embeddings=2 * CAPACITY, embedding_dim=4,
                           feature_names=["i"], dynamic=DynamicTableConfig(eviction="LFU")),
    ]  # fmt: skip


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor
    coefficients: Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


class Model(nn.Module):
    def __init__(self, eviction: str) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(configs(eviction))

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        out = self.sparse(batch.sparse_features).values()
        return (out * batch.coefficients).sum(), out


def make_batch(rank: int, step: int) -> Batch:
    g = seeded_generator("dyn-pipeline", rank, step)
    pool = torch.randint(-(2**62), 2**62, (40,), generator=seeded_generator("dyn-pipeline-pool"))
    lengths = random_lengths(2 * BATCH, 3, g)
    values = pool[torch.randint(0, 40, (int(lengths.sum()),), generator=g)]
    kjt = KeyedJaggedTensor(["u", "i"], values, lengths=lengths, stride=BATCH)
    return Batch(kjt, torch.randn(BATCH, 8, generator=g))


def wrap(ctx: RankContext, types: tuple[str, str], eviction: str) -> DistributedModelParallel:
    torch.manual_seed(7)
    model = Model(eviction)
    generators = {
        n: getattr(shardrec_planner, types[i])(**placement_kwargs(types[i], i, ctx.world_size))
        for i, n in enumerate(("user", "item"))
    }
    plan = construct_module_sharding_plan(model.sparse, generators, world_size=ctx.world_size)
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def state_of(dmp: DistributedModelParallel) -> dict[str, object]:
    found = [m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection)]
    sharded = found[0]
    out: dict[str, object] = {"stats": sharded.dynamic_tables.stats()}
    for name in ("user", "item"):
        table = sharded.dynamic_tables.table(name)
        out[f"{name}.items"] = table.items()
        if name in sharded.embedding_bags:
            out[f"{name}.weight"] = sharded.embedding_bags[name].weight.detach().clone()
    out["optim"] = [
        {k: v.clone() for k, v in m.optimizer_state().items()}
        for s in sharded._strategies
        for m in s.lookup.fused_modules()
    ]
    return out


def train(ctx: RankContext, types: tuple[str, str], eviction: str, how: str) -> dict:
    dmp = wrap(ctx, types, eviction)
    opt = dmp.fused_optimizer
    batches = [make_batch(ctx.rank, s) for s in range(STEPS)]
    if how == "plain":
        for b in batches:
            loss, _ = dmp(b)
            loss.backward()
            opt.step()
    else:
        cls = TrainPipelineSparseDist if how == "pipeline" else PrefetchTrainPipelineSparseDist
        pipe = cls(dmp, opt, torch.device("cpu"))
        it = iter(batches)
        for _ in batches:
            pipe.progress(it)  # type: ignore[arg-type]
        with pytest.raises(StopIteration):
            pipe.progress(it)
    return state_of(dmp)


CASES = [(("table_wise", "row_wise"), "LRU"), (("row_wise", "column_wise"), "LRU")]


def run_cases(ctx: RankContext) -> list[list[dict]]:
    return [
        [train(ctx, types, eviction, how) for how in ("plain", "pipeline", "prefetch")]
        for types, eviction in CASES
    ]


def _equal(a: object, b: object) -> bool:
    if isinstance(a, Tensor):
        return isinstance(b, Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return a == b


@pytest.mark.parametrize("world", [1, 2])
def test_pipelines_evicting_every_step_match_the_plain_loop(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(run_cases)
    for rank in range(world):
        for c, (plain, *pipelined) in enumerate(per_rank[rank]):
            evictions = sum(s["evictions"] for s in plain["stats"].values())
            assert evictions >= STEPS, (CASES[c], rank)  # the tables evict on every step
            for how, run in zip(("pipeline", "prefetch"), pipelined, strict=True):
                for key in plain:
                    assert _equal(run[key], plain[key]), (CASES[c], rank, how, key)


# -- a second training forward before the first's backward ----------------------------------


def _kjt(ids: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        ["u"], torch.tensor(ids), lengths=torch.ones(len(ids), dtype=torch.int64)
    )


def test_second_forward_cannot_evict_the_pending_backwards_slots() -> None:
    """Capacity 4: forward(a) holds ids 1-4; forward(b) with ids 5, 6 before a's backward
    finds no evictable slot (rejects them: zero rows) instead of taking a's slots; after the
    backward, the next step evicts as usual."""
    table = EmbeddingBagConfig(
        name="user", num_embeddings=4, embedding_dim=2, feature_names=["u"],
        dynamic=DynamicTableConfig(eviction="LRU"), init_fn=lambda w: torch.nn.init.ones_(w),
    )  # fmt: skip
    ebc = FusedEmbeddingBagCollection([table], SPEC)
    big = FusedEmbeddingBagCollection([dataclasses.replace(table, num_embeddings=16)], SPEC)
    for m in (ebc, big):
        a = m(_kjt([1, 2, 3, 4])).values()
        b = m(_kjt([5, 6])).values()
        (a.sum() + 2 * b.sum()).backward()
    dyn = ebc.dynamic_tables.table("user")
    assert dyn.stats()["evictions"] == 0 and dyn.stats()["rejections"] == 2
    ids, slots = dyn.items()
    assert sorted(ids.tolist()) == [1, 2, 3, 4]
    ref = big.dynamic_tables.table("user")
    # a's ids got exactly their own gradient (none of b's landed on them).
    torch.testing.assert_close(
        ebc.embedding_bags["user"].weight[slots],
        big.embedding_bags["user"].weight[ref.find(ids)],
        rtol=0,
        atol=0,
    )
    ebc(_kjt([5, 6])).values().sum().backward()  # a's backward ran: 2 LRU slots are taken
    assert dyn.stats()["evictions"] == 2
    assert set(dyn.items()[0].tolist()) >= {5, 6}


def _accumulate(ctx: RankContext) -> dict[str, int]:
    torch.manual_seed(0)
    model = Model("LRU")
    plan = construct_module_sharding_plan(
        model.sparse,
        {"user": shardrec_planner.table_wise(rank=0), "item": shardrec_planner.table_wise(rank=0)},
        world_size=1,
    )
    dmp = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )

    def batch(ids: list[int]) -> Batch:
        kjt = KeyedJaggedTensor(
            ["u", "i"],
            torch.tensor(ids),
            lengths=torch.tensor([1] * len(ids) + [0] * len(ids)),
        )
        return Batch(kjt, torch.ones(len(ids), 8))

    first, _ = dmp(batch(list(range(1, CAPACITY + 1))))
    second, _ = dmp(batch([100, 101]))  # before the first backward: no slot may be taken
    (first + second).backward()
    table = dmp.module.sparse.dynamic_tables.table("user")  # type: ignore[union-attr]
    stats = dict(table.stats())
    third, _ = dmp(batch([100, 101]))  # after it: LRU evicts two of the first batch's ids
    third.backward()
    stats["evictions_after"] = table.stats()["evictions"]
    return stats


def test_sharded_second_forward_cannot_evict_the_pending_backwards_slots(pool_factory):  # type: ignore[no-untyped-def]
    (stats,) = pool_factory(1).run(_accumulate)
    assert stats["evictions"] == 0 and stats["rejections"] == 2
    assert stats["evictions_after"] == 2
