"""TorchRec's virtual tables (`use_virtual_table=True`) through the planner, DMP and DCP.

On 2 gloo ranks, a model whose tables are declared TorchRec's way (a 2^50 virtual id space, an
eviction policy, a capacity given as `dynamic=DynamicTableConfig(capacity=N)`) is planned and
wrapped, and trains exactly as the same model declared with explicit raw-id tables: the same
plan, the same rows per raw id on every rank, bit for bit, with eviction; a checkpoint of it
resumes bit for bit. A sequence (EC) model row_wise gives the explicit one's losses. Bad
policies are refused on every rank.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    dynamic_table_stats,
)
from shardrec_embedding.virtual import CountBasedEvictionPolicy, CountTimestampMixedEvictionPolicy
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    EmbeddingShardingPlanner,
    ShardingPlan,
    Topology,
    construct_module_sharding_plan,
    row_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection
from shardrec_testing import RankContext, random_lengths, seeded_generator

SPACE = 1 << 50
CAP = 16
STEPS = 5
INIT = math.sqrt(1 / 4_000_000_000)
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)


def configs(virtual: bool) -> list[EmbeddingBagConfig]:
    if virtual:
        return [
            EmbeddingBagConfig(name="user", num_embeddings=SPACE, embedding_dim=8,
                               feature_names=["u"], use_virtual_table=True,
                               virtual_table_eviction_policy=CountBasedEvictionPolicy(),
                               dynamic=DynamicTableConfig(capacity=CAP, scan_per_step=4)),
            EmbeddingBagConfig(name="item", num_embeddings=SPACE, embedding_dim=4,
                               feature_names=["i"], use_virtual_table=True,
                               dynamic=DynamicTableConfig(capacity=CAP, eviction="NONE")),
        ]  # fmt: skip
    return [
        EmbeddingBagConfig(name="user", num_embeddings=CAP, embedding_dim=8, feature_names=["u"],
                           weight_init_min=-INIT, weight_init_max=INIT,
                           dynamic=DynamicTableConfig(eviction="LFU", scan_per_step=4)),
        EmbeddingBagConfig(name="item", num_embeddings=CAP, embedding_dim=4, feature_names=["i"],
                           weight_init_min=-INIT, weight_init_max=INIT,
                           dynamic=DynamicTableConfig(eviction="NONE")),
    ]  # fmt: skip


class Model(nn.Module):
    def __init__(self, virtual: bool) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(configs(virtual), device="meta")

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out = self.sparse(kjt).values()
        return (out * torch.linspace(-1, 1, out.shape[1])).square().sum()


def make_batch(rank: int, step: int) -> KeyedJaggedTensor:
    """Raw ids over the 2^50 space from a pool of 3 x CAP ids: the user table evicts."""
    g = seeded_generator("virtual-dmp", rank, step)
    pool = torch.randint(0, SPACE, (3 * CAP,), generator=seeded_generator("virtual-dmp-pool"))
    lengths = random_lengths(2 * 3, 3, g)
    values = pool[torch.randint(0, 3 * CAP, (int(lengths.sum()),), generator=g)]
    return KeyedJaggedTensor(["u", "i"], values, lengths=lengths, stride=3)


def wrap(ctx: RankContext, virtual: bool, planned: bool) -> DistributedModelParallel:
    torch.manual_seed(0)
    model = Model(virtual)
    plan = None
    if not planned:
        plan = ShardingPlan(
            plan={
                "sparse": construct_module_sharding_plan(
                    model.sparse, {"user": row_wise(), "item": row_wise()}, world_size=2
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
        dmp(make_batch(rank, s)).backward()
        dmp.fused_optimizer.step()


def rows_of(dmp: DistributedModelParallel) -> dict[str, tuple[list[int], Tensor]]:
    """Table -> (raw ids, their rows) on this rank, sorted by id."""
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    out = {}
    for name in ("user", "item"):
        if not any(t.name == name and t.local(sharded.env.rank) for t in sharded._tables):
            continue  # not on this rank (table_wise elsewhere)
        ids, slots = sharded.dynamic_tables.table(name).items()
        order = torch.argsort(ids)
        weight = sharded.embedding_bags[name].weight.detach()
        out[name] = (ids[order].tolist(), weight[slots[order]].clone())
    return out


def train_both(ctx: RankContext, planned: bool) -> list[object]:
    out: list[object] = []
    for virtual in (True, False):
        dmp = wrap(ctx, virtual, planned)
        steps(dmp, ctx.rank, 0, STEPS)
        out += [rows_of(dmp), dynamic_table_stats(dmp), dmp.plan.plan["sparse"]]
    return out


@pytest.mark.parametrize("planned", [True, False], ids=["planner", "row-wise"])
def test_virtual_tables_train_as_the_explicit_raw_id_tables(pool_factory, planned):  # type: ignore[no-untyped-def]
    evictions = 0
    for v_rows, v_stats, v_plan, e_rows, e_stats, e_plan in pool_factory(2).run(
        train_both, planned
    ):
        evictions += sum(v["evictions"] for k, v in v_stats.items() if k.endswith("user"))
        assert str(v_plan) == str(e_plan)
        assert v_stats == e_stats
        assert v_rows.keys() == e_rows.keys()
        for name in v_rows:
            assert v_rows[name][0] == e_rows[name][0], name
            assert torch.equal(v_rows[name][1], e_rows[name][1]), name
    assert evictions > 0


def test_planner_sizes_a_virtual_table_by_its_capacity() -> None:
    sharders = [EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())]
    plans = []
    for virtual in (True, False):
        planner = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu"))
        plans.append(planner.plan(Model(virtual), sharders))
    assert str(plans[0]) == str(plans[1])
    for name in ("user", "item"):
        spec = plans[0].plan["sparse"][name].sharding_spec  # type: ignore[index]
        assert spec is not None
        # sharded by its 16 slots (the weight is capacity x dim), not by the 2^50 id space
        assert sum(s.shard_sizes[0] for s in spec.shards) == CAP


def resume(ctx: RankContext, path: str) -> list[object]:
    straight = wrap(ctx, True, False)
    steps(straight, ctx.rank, 0, STEPS)
    first = wrap(ctx, True, False)
    steps(first, ctx.rank, 0, 2)
    save(path, first, {"fused": first.fused_optimizer})
    again = wrap(ctx, False, False)  # the explicit model loads the virtual one's checkpoint
    load(path, again, {"fused": again.fused_optimizer})
    steps(again, ctx.rank, 2, STEPS)
    return [rows_of(straight), rows_of(again), dynamic_table_stats(straight)]


def test_checkpoint_resumes_bit_for_bit(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    for straight, again, stats in pool_factory(2).run(resume, str(tmp_path / "ckpt")):
        assert straight.keys() == again.keys()
        for name in straight:
            assert straight[name][0] == again[name][0], name
            assert torch.equal(straight[name][1], again[name][1]), name
        assert sum(v["occupancy"] for v in stats.values()) > 0


def build_bad(ctx: RankContext) -> str:
    try:
        EmbeddingBagConfig(
            name="user",
            num_embeddings=SPACE,
            embedding_dim=8,
            use_virtual_table=True,
            virtual_table_eviction_policy=CountTimestampMixedEvictionPolicy(),
            dynamic=DynamicTableConfig(capacity=CAP),
        )
    except ValueError as e:
        return f"{ctx.rank}: {e}"
    return "no error"


def test_refusals_are_raised_on_every_rank(pool_factory):  # type: ignore[no-untyped-def]
    messages = pool_factory(2).run(build_bad)
    assert len(messages) == 2
    for rank, message in enumerate(messages):
        assert message.startswith(f"{rank}: table 'user': ")
        assert "CountTimestampMixedEvictionPolicy is not supported" in message
        assert "CountBasedEvictionPolicy (LFU)" in message


class SequenceModel(nn.Module):
    def __init__(self, virtual: bool) -> None:
        super().__init__()
        cfg = EmbeddingConfig(
            name="user",
            num_embeddings=SPACE if virtual else CAP,
            embedding_dim=4,
            feature_names=["u", "i"],
            use_virtual_table=virtual,
            virtual_table_eviction_policy=CountBasedEvictionPolicy() if virtual else None,
            weight_init_min=None if virtual else -INIT,
            weight_init_max=None if virtual else INIT,
            dynamic=DynamicTableConfig(capacity=CAP, eviction="LFU", scan_per_step=4),
        )
        self.sparse = EmbeddingCollection([cfg], device="meta")

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out = torch.cat([jt.values() for jt in self.sparse(kjt).values()])
        return (out * torch.linspace(-1, 1, out.shape[1])).square().sum()


def train_sequences(ctx: RankContext) -> list[list[float]]:
    losses = []
    for virtual in (True, False):
        torch.manual_seed(0)
        model = SequenceModel(virtual)
        plan = ShardingPlan(
            plan={
                "sparse": construct_module_sharding_plan(
                    model.sparse, {"user": row_wise()}, world_size=2
                )
            }
        )
        dmp = DistributedModelParallel(
            model,
            env=ShardingEnv.from_process_group(ctx.pg),
            plan=plan,
            sharders=[EmbeddingCollectionSharder(fused_params=SPEC.to_fused_params())],
        )
        run = []
        for s in range(STEPS):
            loss = dmp(make_batch(ctx.rank, s))
            loss.backward()
            dmp.fused_optimizer.step()
            run.append(loss.item())
        losses.append(run)
    return losses


def test_sequence_collection_row_wise_equals_the_explicit_table(pool_factory):  # type: ignore[no-untyped-def]
    for virtual, explicit in pool_factory(2).run(train_sequences):
        assert virtual == explicit and len(virtual) == STEPS
