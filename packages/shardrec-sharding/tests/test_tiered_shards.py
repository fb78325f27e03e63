"""A `key_value` table of every sharding type runs tiered on each rank that holds a shard of it
(its own store in `<dir>/rank-<r>`, a cache of `CacheParams.load_factor` of the shard's rows)
and trains, on 1 and 2 gloo ranks with caches that evict, exactly as the same plan with the
in-memory `fused` kernel: SGD and row-wise Adagrad, weighted features, empty batches, and a
learning-rate schedule on the sharded `fused_optimizer` (which includes the tiered tables); and
sequence tables (EmbeddingCollection) likewise on one rank."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    column_wise,
    construct_module_sharding_plan,
    kernel_notes,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, random_lengths, seeded_generator
from shardrec_tiered import TieredFusedEmbeddingBag

ROWS, DIM, BATCH, MAX_LEN, STEPS = 96, 8, 4, 4, 8
CONFIGS = [
    EmbeddingBagConfig(name="big", num_embeddings=ROWS, embedding_dim=DIM, feature_names=["a"]),
    EmbeddingBagConfig(name="small", num_embeddings=10, embedding_dim=DIM, feature_names=["b"]),
]
SHARDING_TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise"]
ROW_SPLIT = {"row_wise", "table_row_wise"}


@dataclasses.dataclass(frozen=True)
class Case:
    sharding_type: str
    optimizer: EmbOptimType
    weighted: bool


CASES = [
    Case(st, opt, weighted)
    for st in SHARDING_TYPES
    for opt, weighted in (
        (EmbOptimType.SGD, False),
        (EmbOptimType.EXACT_ROWWISE_ADAGRAD, False),
        (EmbOptimType.EXACT_ROWWISE_ADAGRAD, True),
    )
]


def generator(sharding_type: str, world: int, kernel: str) -> Any:
    ranks = list(range(world)) if world > 1 else [0, 0]  # one rank: two column blocks on it
    return {
        "table_wise": lambda: table_wise(rank=world - 1, compute_kernel=kernel),
        "row_wise": lambda: row_wise(compute_kernel=kernel),
        "column_wise": lambda: column_wise(ranks=ranks, compute_kernel=kernel),
        "table_row_wise": lambda: table_row_wise(host_index=0, compute_kernel=kernel),
        "table_column_wise": lambda: table_column_wise(ranks=ranks, compute_kernel=kernel),
    }[sharding_type]()


def load_factor(case: Case, world: int) -> float:
    """The cache of each shard holds exactly the most distinct rows one step brings it (from
    every rank's batch): the smallest cache allowed, evicting as soon as the ids move on."""
    shard_rows = ROWS // world if case.sharding_type in ROW_SPLIT else ROWS
    need = 1
    for step in range(STEPS):
        ids = torch.cat([batch(case, r, step)["a"].values() for r in range(world)])
        for lo in range(0, ROWS, shard_rows):
            mine = ids[(ids >= lo) & (ids < lo + shard_rows)]
            need = max(need, int(mine.unique().numel()))
    return need / shard_rows


def batch(case: Case, rank: int, step: int) -> KeyedJaggedTensor:
    g = seeded_generator("tiered-shards-batch", case.sharding_type, rank, step)
    lengths = random_lengths(2 * BATCH, MAX_LEN, g)
    if (step == 2 and rank == 0) or step == 3:  # an empty batch on one rank, then on all
        lengths.zero_()
    a = int(lengths[:BATCH].sum())
    values = torch.cat(
        [
            torch.randint(0, ROWS, (a,), generator=g),
            torch.randint(0, 10, (int(lengths[BATCH:].sum()),), generator=g),
        ]
    )
    weights = torch.rand(values.numel(), generator=g) if case.weighted else None
    return KeyedJaggedTensor(["a", "b"], values, lengths=lengths, weights=weights)


def full_table(ctx: RankContext, sharded: torch.nn.Module, name: str) -> torch.Tensor:
    """Table `name` made whole from every rank's local shard (sum of zero-padded shards)."""
    rows = next(c.num_embeddings for c in CONFIGS if c.name == name)
    full = torch.zeros(rows, DIM)
    table = next(t for t in sharded._tables if t.name == name)
    local = table.local(ctx.rank)
    if local is not None:
        tiered = [
            g.module
            for s in sharded._strategies
            for g in s.lookup.groups
            if isinstance(g.module, TieredFusedEmbeddingBag) and name in g.module.tables
        ]
        if tiered:
            tiered[0].flush()
            weight, _ = tiered[0].read_table(name)
        else:
            weight = sharded.embedding_bags[name].weight.detach()
        col = 0
        for c0, n in local.column_blocks:
            full[local.row_offset : local.row_offset + local.rows, c0 : c0 + n] += weight[
                :, col : col + n
            ]
            col += n
    torch.distributed.all_reduce(full, group=ctx.pg)
    return full


def train(ctx: RankContext, case: Case, kernel: str, store: str) -> dict[str, Any]:
    """Train `STEPS` steps under `case` with `kernel` for table "big"; whole tables and facts."""
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    ebc = EmbeddingBagCollection(CONFIGS, is_weighted=case.weighted)
    g = seeded_generator("tiered-shards-init")
    with torch.no_grad():
        for c in CONFIGS:
            ebc.embedding_bags[c.name].weight.copy_(torch.randn(c.num_embeddings, DIM, generator=g))
    plan = construct_module_sharding_plan(
        ebc,
        {"big": generator(case.sharding_type, world, kernel), "small": table_wise(rank=0)},
        world_size=world,
        local_world_size=world,
    )
    if kernel == "key_value":
        plan["big"] = dataclasses.replace(
            plan["big"],
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            cache_params=CacheParams(load_factor=load_factor(case, world)),
        )
    spec = FusedOptimSpec(optimizer=case.optimizer, learning_rate=0.1)
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    sharded = sharder.shard(ebc, plan, env)
    optimizer = sharded.fused_optimizer
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5**s)
    for step in range(STEPS):
        kjt = batch(case, ctx.rank, step)
        coefficients = torch.randn(BATCH, 2 * DIM, generator=seeded_generator("c", ctx.rank, step))
        (sharded(kjt).wait().values() * coefficients).sum().backward()
        optimizer.step()
        schedule.step()
    tiered = [
        g.module
        for s in sharded._strategies
        for g in s.lookup.groups
        if isinstance(g.module, TieredFusedEmbeddingBag)
    ]
    facts: dict[str, Any] = {
        "big": full_table(ctx, sharded, "big"),
        "small": full_table(ctx, sharded, "small"),
        "params": sorted(optimizer.params),
        "lrs": [float(group["lr"]) for group in optimizer.param_groups],
        "caches": [(c.slots, c.misses) for m in tiered for c in m.caches],
        "stores": sorted(str(p.relative_to(store)) for p in pathlib.Path(store).rglob("*.tier")),
        "notes": kernel_notes(plan["big"]),
    }
    return facts


@pytest.mark.parametrize("rank_pool", [1, 2], indirect=True)
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c.sharding_type}-{c.optimizer.name}-w{int(c.weighted)}"
)
def test_tiered_shards_train_as_fused(rank_pool, case: Case, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    world = rank_pool.world_size
    store = str(tmp_path / "store")
    tiered = rank_pool.run(train, case, "key_value", store)
    fused = rank_pool.run(train, case, "fused", str(tmp_path / "unused"))
    holders = {
        "table_wise": [world - 1],
        "row_wise": list(range(world)),
        "table_row_wise": list(range(world)),
    }.get(case.sharding_type, list(range(world)))
    assert tiered[0]["stores"] == [f"rank-{r}/big.tier" for r in holders]
    assert fused[0]["stores"] == []
    for rank in range(world):
        t, f = tiered[rank], fused[rank]
        assert torch.equal(t["big"], f["big"]), f"{case} rank {rank}"
        assert torch.equal(t["small"], f["small"]), f"{case} rank {rank}"
        # The schedule reached every group of the sharded fused optimizer, tiered included.
        assert t["params"] == f["params"]
        assert ("embedding_bags.big.weight" in t["params"]) == (rank in holders)
        assert t["lrs"] == [0.1 * 0.5**STEPS] * len(t["lrs"])
        assert "kernel key_value runs tiered" in t["notes"][0]
        if rank in holders:
            ((slots, misses),) = t["caches"]
            assert misses > slots, f"{case}: the cache of {slots} rows never evicted"
        else:
            assert t["caches"] == []


def sequence_train(kernel: str, sharding_type: str, store: pathlib.Path) -> torch.nn.Module:
    """An EmbeddingCollection (sequence lookups) trained 6 steps on one rank."""
    from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
    from shardrec_sharding import EmbeddingCollectionSharder

    torch.manual_seed(0)
    ec = EmbeddingCollection(
        tables=[EmbeddingConfig(name="t", num_embeddings=50, embedding_dim=8, feature_names=["a"])]
    )
    plan = construct_module_sharding_plan(
        ec, {"t": generator(sharding_type, 1, kernel)}, world_size=1, local_world_size=1
    )
    if kernel == "key_value":
        plan["t"] = dataclasses.replace(
            plan["t"],
            key_value_params=KeyValueParams(ssd_storage_directory=str(store)),
            cache_params=CacheParams(load_factor=0.3),
        )
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    sharded = EmbeddingCollectionSharder(fused_params=spec.to_fused_params()).shard(
        ec, plan, ShardingEnv.from_local(1, 0)
    )
    g = seeded_generator("tiered-sequence", sharding_type)
    for _ in range(6):
        lengths = torch.tensor([3, 0, 4, 3])
        kjt = KeyedJaggedTensor(["a"], torch.randint(0, 50, (10,), generator=g), lengths=lengths)
        out = sharded(kjt)
        out = out.wait() if hasattr(out, "wait") else out
        (out["a"].values() * torch.linspace(-1, 1, 80).view(10, 8)).sum().backward()
    return sharded


@pytest.mark.parametrize("sharding_type", ["table_wise", "row_wise", "column_wise"])
def test_sequence_tables_run_tiered(sharding_type: str, tmp_path: pathlib.Path) -> None:
    from shardrec_sharding import tiered_lookups

    plain = sequence_train("fused", sharding_type, tmp_path)
    tiered = sequence_train("key_value", sharding_type, tmp_path)
    [lookup] = tiered_lookups(tiered)
    lookup.flush()
    assert lookup.caches[0].slots == 15 and lookup.stats()["t"]["misses"] > 15  # evicted
    assert torch.equal(lookup.read_table("t")[0], plain.embeddings["t"].weight.detach())
