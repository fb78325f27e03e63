"""Bucketed raw-id tables (`total_num_buckets`) saved on one world size and loaded on another:
the ids are re-partitioned by the table's bucket rule (each lands on the rank owning its
bucket, TorchRec's rule), keep their rows and optimizer state, and training continues as the
unsharded table trained on the same batches."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import shardrec_planner
from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import ShardingPlan, construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection
from shardrec_sharding.id_buckets import bucket_bounds, bucket_part
from shardrec_testing import RankContext, random_lengths, seeded_generator

SPACE = 10 << 40
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
STEPS = 4
KEYS = ["fb"]


def _const(w: Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)


def config() -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="b", num_embeddings=40, embedding_dim=4, feature_names=KEYS, init_fn=_const,
        total_num_buckets=5, id_space=SPACE, dynamic=DynamicTableConfig(eviction="NONE"),
    )  # fmt: skip


def make_batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, Tensor]:
    g = seeded_generator("bucket-ckpt", rank, step)
    pool = torch.cat(
        [
            torch.randint(0, SPACE, (7,), generator=seeded_generator("bucket-ckpt-pool")),
            torch.tensor([-5, SPACE + 1]),
        ]
    )
    size = (rank + step) % 3 + 1
    lengths = random_lengths(size, 3, g)
    values = pool[torch.randint(0, pool.numel(), (int(lengths.sum()),), generator=g)]
    return KeyedJaggedTensor(KEYS, values, lengths=lengths, stride=size), torch.randn(
        size, 4, generator=g
    )


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection([config()])

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        return self.sparse(kjt).values()


def wrap(ctx: RankContext) -> DistributedModelParallel:
    model = Model()
    gen = shardrec_planner.row_wise(num_buckets=5)
    plan = ShardingPlan(
        plan={
            "sparse": construct_module_sharding_plan(
                model.sparse, {"b": gen}, world_size=ctx.world_size
            )
        }
    )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=plan,
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def steps(dmp: DistributedModelParallel, rank: int, first: int, last: int) -> None:
    for s in range(first, last):
        kjt, coefficients = make_batch(rank, s)
        (dmp(kjt) * coefficients).sum().backward()
        dmp.fused_optimizer.step()


def held(dmp: DistributedModelParallel) -> dict[int, tuple[Tensor, float]]:
    """Raw id -> (its row, its row-wise Adagrad state) on this rank."""
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    ids, slots = sharded.dynamic_tables.table("b").items()
    rows = sharded.embedding_bags["b"].weight.detach()[slots]
    momenta = torch.zeros(ids.numel())
    for module, offset in sharded._lookup_modules_of("b"):
        momenta = module.optimizer_state()["momentum1"][slots + offset]
    return {
        i: (r.clone(), float(m))
        for i, r, m in zip(ids.tolist(), rows, momenta.tolist(), strict=True)
    }


def save_two(ctx: RankContext, path: str) -> dict[int, tuple[Tensor, float]]:
    dmp = wrap(ctx)
    steps(dmp, ctx.rank, 0, 2)
    save(path, dmp, {"fused": dmp.fused_optimizer})
    return held(dmp)


def load_two(ctx: RankContext, path: str) -> tuple[dict, dict]:
    dmp = wrap(ctx)
    load(path, dmp, {"fused": dmp.fused_optimizer})
    loaded = held(dmp)
    steps(dmp, ctx.rank, 2, STEPS)
    return loaded, held(dmp)


def owner(x: int, world: int) -> int:
    rows = [(5 // world + (r < 5 % world)) * 8 for r in range(world)]
    return int(bucket_part(torch.tensor([x]), bucket_bounds("b", 5, SPACE, 40, rows)))


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3)])
def test_load_on_another_world_repartitions_by_bucket(pool_factory, tmp_path, before, after):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    saved: dict = {}
    for part in pool_factory(before).run(save_two, path):
        saved.update(part)
    results = pool_factory(after).run(load_two, path)
    loaded: dict = {}
    for rank, (part, _) in enumerate(results):
        assert all(owner(x, after) == rank for x in part), rank  # the bucket's rank
        loaded.update(part)
    assert loaded.keys() == saved.keys() and len(saved) > 2
    for x, (row, momentum) in saved.items():
        assert torch.equal(loaded[x][0], row) and loaded[x][1] == momentum, x
    assert any(m > 0 for _, m in saved.values())
    ref = FusedEmbeddingBagCollection([config()], SPEC)
    for step in range(STEPS):
        world = before if step < 2 else after
        pairs = [make_batch(r, step) for r in range(world)]
        dicts = [k.to_dict()["fb"] for k, _ in pairs]
        kjt = KeyedJaggedTensor(
            KEYS,
            torch.cat([d.values() for d in dicts]),
            lengths=torch.cat([d.lengths() for d in dicts]),
        )
        (ref(kjt).values() * torch.cat([c for _, c in pairs])).sum().backward()
    table = ref.dynamic_tables.table("b")
    weight = ref.embedding_bags["b"].weight.detach()
    final = {x: r for _, part in results for x, (r, _) in part.items()}
    assert sorted(final) == sorted(table.items()[0].tolist())
    for x, row in final.items():
        assert torch.equal(row, weight[table.find(torch.tensor([x]))][0]), x
