"""Dynamic (raw-id) tables through DistributedModelParallel and TrainPipelineSparseDist.

On 2 ranks, a model whose collection has dynamic tables is planned (by the planner, or a
given plan), wrapped, and trained by the plain loop and by the pipeline: both give every raw id
the vector the unsharded fused collection gives it when trained on the concatenation of the
ranks' batches (nothing evicted; rows start from a constant, see test_dynamic_sharding).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

import shardrec_planner
from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist, load, save
from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    dynamic_table_stats,
)
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import ShardingPlan, construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection, owner_part
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator
from shardrec_testing.placements import placement_kwargs

FEATURES = ["u", "i"]
STEPS = 4
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)


THRESHOLD_2 = DynamicTableConfig(admission="THRESHOLD", admission_threshold=2)


def _const(w: Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)


def configs(scale: float = 1.0, user_dim: int = 8) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="user", num_embeddings=int(40 * scale), embedding_dim=user_dim,
                           feature_names=["u"], init_fn=_const, dynamic=DynamicTableConfig()),
        EmbeddingBagConfig(name="item", num_embeddings=int(32 * scale), embedding_dim=4,
                           feature_names=["i"],
                           init_fn=_const,
                           dynamic=THRESHOLD_2),
    ]  # fmt: skip


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor
    coefficients: Tensor  # (B, 12)

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


class Model(nn.Module):
    def __init__(self, scale: float = 1.0, user_dim: int = 8) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(configs(scale, user_dim))

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        out = self.sparse(batch.sparse_features).values()
        return (out * batch.coefficients).sum(), out


def make_batch(rank: int, step: int) -> Batch:
    g = seeded_generator("dyn-dmp", rank, step)
    pool = torch.randint(-(2**63), 2**63 - 1, (10,), generator=seeded_generator("dyn-dmp-pool"))
    size = (rank + step) % 3 + 1
    lengths = random_lengths(2 * size, 3, g)
    values = pool[torch.randint(0, 10, (int(lengths.sum()),), generator=g)]
    kjt = KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=size)
    return Batch(kjt, torch.randn(size, 12, generator=g))


def concat(batches: list[Batch]) -> Batch:
    dicts = [b.sparse_features.to_dict() for b in batches]
    kjt = KeyedJaggedTensor(
        FEATURES,
        torch.cat([d[f].values() for f in FEATURES for d in dicts]),
        lengths=torch.cat([d[f].lengths() for f in FEATURES for d in dicts]),
        stride=sum(b.coefficients.shape[0] for b in batches),
    )
    return Batch(kjt, torch.cat([b.coefficients for b in batches]))


def wrap(
    ctx: RankContext, types: tuple[str, str] | None, scale: float = 1.0, user_dim: int = 8
) -> DistributedModelParallel:
    model = Model(scale, user_dim)
    plan = None
    if types is not None:
        generators = {
            n: getattr(shardrec_planner, types[i])(**placement_kwargs(types[i], i, ctx.world_size))
            for i, n in enumerate(("user", "item"))
        }
        plan = ShardingPlan(
            plan={
                "sparse": construct_module_sharding_plan(
                    model.sparse, generators, world_size=ctx.world_size
                )
            }
        )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=plan,
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def rows_of(dmp: DistributedModelParallel) -> dict[str, tuple[Tensor, Tensor, tuple]]:
    found = [m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection)]
    assert len(found) == 1
    sharded = found[0]
    out = {}
    for t in sharded._tables:
        local = t.local(sharded.env.rank)
        if local is None:
            continue
        ids, slots = sharded.dynamic_tables.table(t.name).items()
        weight = sharded.embedding_bags[t.name].weight.detach()
        out[t.name] = (ids.clone(), weight[slots].clone(), local.column_blocks)
    return out


def train(ctx: RankContext, types: tuple[str, str] | None, pipelined: bool) -> dict:
    dmp = wrap(ctx, types)
    opt = dmp.fused_optimizer
    batches = [make_batch(ctx.rank, s) for s in range(STEPS)]
    if pipelined:
        pipe = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        it = iter(batches)
        for _ in batches:
            pipe.progress(it)  # type: ignore[arg-type]
        with pytest.raises(StopIteration):
            pipe.progress(it)
    else:
        for b in batches:
            loss, _ = dmp(b)
            loss.backward()
            opt.step()
    return rows_of(dmp)


def run_cases(ctx: RankContext, cases: list[tuple[tuple[str, str] | None, bool]]) -> list[dict]:
    return [train(ctx, types, pipelined) for types, pipelined in cases]


CASES = [
    (None, False),  # the planner's plan
    (("row_wise", "table_wise"), False),
    (("row_wise", "table_wise"), True),
    (("table_wise", "row_wise"), True),
]


def test_dmp_and_pipeline_match_unsharded(pool_factory):  # type: ignore[no-untyped-def]
    world = 2
    per_rank = pool_factory(world).run(run_cases, CASES)
    ref = FusedEmbeddingBagCollection(configs(), SPEC)
    for step in range(STEPS):
        b = concat([make_batch(r, step) for r in range(world)])
        (ref(b.sparse_features).values() * b.coefficients).sum().backward()
    for c, case in enumerate(CASES):
        for name in ("user", "item"):
            table = ref.dynamic_tables.table(name)
            weight = ref.embedding_bags[name].weight.detach()
            seen: set[int] = set()
            for rank in range(world):
                if name not in per_rank[rank][c]:
                    continue
                ids, rows, blocks = per_rank[rank][c][name]
                seen.update(ids.tolist())
                slots = table.find(ids)
                assert bool((slots >= 0).all()), (case, name)
                want = torch.cat([weight[slots, a : a + n] for a, n in blocks], dim=1)
                assert_close(rows, want, msg=f"{case} {name}")
            assert seen == set(table.items()[0].tolist()), (case, name)


# -- checkpoints --------------------------------------------------------------------------


def steps(dmp: DistributedModelParallel, rank: int, first: int, last: int) -> None:
    for s in range(first, last):
        loss, _ = dmp(make_batch(rank, s))
        loss.backward()
        dmp.fused_optimizer.step()


def resume(ctx: RankContext, path: str, types: tuple[str, str]) -> list[dict]:
    """Straight 4 steps; 2 steps, save, a fresh model loads and trains 2 more."""
    straight = wrap(ctx, types)
    steps(straight, ctx.rank, 0, STEPS)
    first = wrap(ctx, types)
    steps(first, ctx.rank, 0, 2)
    save(path, first, {"fused": first.fused_optimizer})
    again = wrap(ctx, types)
    load(path, again, {"fused": again.fused_optimizer})
    steps(again, ctx.rank, 2, STEPS)
    return [rows_of(straight), rows_of(again), stats_of(straight), stats_of(again)]


def stats_of(dmp: DistributedModelParallel) -> dict:
    return dynamic_table_stats(dmp)


@pytest.mark.parametrize("types", [("row_wise", "table_wise"), ("column_wise", "row_wise")])
def test_resume_is_bit_for_bit(pool_factory, tmp_path, types):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    for straight, again, s_stats, a_stats in pool_factory(2).run(resume, path, types):
        assert s_stats == a_stats
        assert straight.keys() == again.keys()
        for name in straight:
            assert torch.equal(straight[name][0], again[name][0]), name
            assert torch.equal(straight[name][1], again[name][1]), name


def save_two_steps(ctx: RankContext, path: str) -> bool:
    dmp = wrap(ctx, ("row_wise", "table_wise"))
    steps(dmp, ctx.rank, 0, 2)
    save(path, dmp, {"fused": dmp.fused_optimizer})
    return momenta_of(dmp)


def momenta_of(dmp: DistributedModelParallel) -> dict[tuple[str, int], float]:
    """(table, raw id) -> its row-wise Adagrad state on this rank."""
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    out = {}
    for name in ("user", "item"):
        ids, slots = sharded.dynamic_tables.table(name).items()
        for module, offset in sharded._lookup_modules_of(name):
            state = module.optimizer_state()["momentum1"][slots + offset]
            out.update({(name, i): v for i, v in zip(ids.tolist(), state.tolist(), strict=True)})
    return out


def load_and_train(ctx: RankContext, path: str, types: tuple[str, str], scale: float) -> dict:
    dmp = wrap(ctx, types, scale)
    load(path, dmp, {"fused": dmp.fused_optimizer})
    loaded = momenta_of(dmp)
    steps(dmp, ctx.rank, 2, STEPS)
    return rows_of(dmp), loaded


def load_bad(ctx: RankContext, path: str, scale: float, user_dim: int) -> str:
    dmp = wrap(ctx, ("row_wise", "table_wise"), scale, user_dim)
    try:
        load(path, dmp, {"fused": dmp.fused_optimizer})
    except ValueError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize(
    ("world", "types", "scale"),
    [(1, ("row_wise", "table_wise"), 1.0), (2, ("table_wise", "row_wise"), 1.5)],
    ids=["world-2-to-1", "larger-capacity-other-plan"],
)
def test_load_repartitions_by_id_hash(pool_factory, tmp_path, world, types, scale):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    saved: dict = {}
    for part in pool_factory(2).run(save_two_steps, path):
        saved.update(part)
    results = pool_factory(world).run(load_and_train, path, types, scale)
    loaded: dict = {}
    for _, part in results:
        loaded.update(part)
    assert loaded == saved and any(v > 0 for v in saved.values())  # optimizer state per id
    per_rank = [rows for rows, _ in results]
    ref = FusedEmbeddingBagCollection(configs(), SPEC)
    for step in range(STEPS):
        ranks = 2 if step < 2 else world
        b = concat([make_batch(r, step) for r in range(ranks)])
        (ref(b.sparse_features).values() * b.coefficients).sum().backward()
    for name in ("user", "item"):
        table = ref.dynamic_tables.table(name)
        weight = ref.embedding_bags[name].weight.detach()
        seen: set[int] = set()
        for rank_rows in per_rank:
            if name not in rank_rows:
                continue
            ids, rows, blocks = rank_rows[name]
            seen.update(ids.tolist())
            slots = table.find(ids)
            assert bool((slots >= 0).all()), name
            want = torch.cat([weight[slots, a : a + n] for a, n in blocks], dim=1)
            assert_close(rows, want, msg=name)
        if name == "user":  # admitted always: exactly the reference's ids
            assert seen == set(table.items()[0].tolist())


@pytest.mark.parametrize(
    ("scale", "user_dim", "words"),
    [(1.0, 6, ["'user'", "embedding_dim 8", "embedding_dim=8"]),
     (0.5, 8, ["'user'", "capacity 40", "num_embeddings >= 40"])],
    ids=["dim", "smaller-capacity"],
)  # fmt: skip
def test_mismatched_checkpoint_is_refused_on_every_rank(
    pool_factory, tmp_path, scale, user_dim, words
):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    pool_factory(2).run(save_two_steps, path)
    for message in pool_factory(2).run(load_bad, path, scale, user_dim):
        assert all(w in message for w in words), message


def save_with_ages(ctx: RankContext, path: str) -> dict:
    """Train 4 steps and save; (table, id) -> (row, last seen) on this rank."""
    dmp = wrap(ctx, ("row_wise", "table_wise"))
    steps(dmp, ctx.rank, 0, STEPS)
    save(path, dmp, {"fused": dmp.fused_optimizer})
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    out = {}
    for name, (ids, rows, _) in rows_of(dmp).items():
        part = sharded.dynamic_tables.table(name)
        seen = part.last_seen[part.items()[1]]
        for i, row, s in zip(ids.tolist(), rows, seen.tolist(), strict=True):
            out[(name, i)] = (row, s)
    return out


def load_evicting(ctx: RankContext, path: str) -> tuple[dict, dict]:
    dmp = wrap(ctx, ("row_wise", "table_wise"), scale=0.1)  # user 4 slots, item 3
    load(path, dmp, {"fused": dmp.fused_optimizer}, evict_to_fit=True)
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    capacities = {n: sharded.dynamic_tables.table(n).capacity for n in ("user", "item")}
    rows = {
        (n, i): r
        for n, (ids, rs, _) in rows_of(dmp).items()
        for i, r in zip(ids.tolist(), rs, strict=True)
    }
    return rows, capacities


def test_evict_to_fit_keeps_the_most_recent_ids(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    saved: dict = {}
    for part in pool_factory(2).run(save_with_ages, path):
        saved.update(part)
    results = pool_factory(2).run(load_evicting, path)
    for rank, (rows, capacities) in enumerate(results):
        for name in ("user", "item"):
            mine = {k: v for k, v in rows.items() if k[0] == name}
            assert len(mine) <= capacities[name]
            for key, row in mine.items():
                assert torch.equal(row, saved[key][0]), key  # an id keeps its vector
            if name == "user" and capacities[name]:  # row_wise: this rank's hash part
                ids = torch.tensor([i for (n, i) in saved if n == name])
                owned = ids[owner_part(ids, 2) == rank].tolist()
                assert len(mine) == min(len(owned), capacities[name])
                kept_age = min((saved[k][1] for k in mine), default=0)
                dropped = [saved[(name, i)][1] for i in owned if (name, i) not in mine]
                assert all(age <= kept_age for age in dropped)  # LRU: the oldest went
