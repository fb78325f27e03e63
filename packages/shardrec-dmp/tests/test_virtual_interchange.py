"""Checkpoints of a dynamic table held in memory (`fused`) load into the same table as a
raw-id tier (`dram_virtual_table` / `ssd_virtual_table`) and back, through
`shardrec_dmp.save` / `load` (shardrec_dmp/checkpoint_interchange.py).

References: train N steps one way, save, load into the other kind, train M more == the first
kind trained N + M straight, bit for bit (no eviction in the in-memory table; the tier's
cache of 8 rows evicts every step; after the save, the ids both kinds hold), on 2 gloo
ranks, table_wise and row_wise on either side.
A checkpoint of 2 ranks loads into 1 and one of 1 rank into 2, holding the saved ids' rows.
Refused on every rank: another embedding_dim, another optimizer, more ids than the in-memory
table holds (unless evict_to_fit: then it keeps that many of them, with their saved rows). A
tier holding no id loads as an empty table; a model that is the collection itself (plan key
"") swaps both ways. A column_wise in-memory table with row-wise
Adagrad (state per column block) is refused both ways; with Adagrad it loads. A column-split
tier's checkpoint (per column block) into memory is refused.
The tables are read here without the checkpoint code: the in-memory table's occupied slots,
weights and fused optimizer state; the tier's store after a flush.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _raw_model import RawModel
from torch import Tensor

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    KeyValueParams,
    ShardingPlan,
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, random_lengths, seeded_generator
from shardrec_tiered.raw_checkpoint import store_ids

DIM = 4
STEPS = 6
SAVED_AT = 3
BAGS = 3
MEMORY = 64  # slots of the in-memory table: never evicts the 24 ids (32 per row_wise part)
CACHE = 8  # rows of the tier's cache: evicts every step


def batch(rank: int, step: int, dim: int = DIM) -> tuple[KeyedJaggedTensor, Tensor]:
    """A window of 8 of 24 raw ids (negatives and large ones), moving by 5 a step; from step
    SAVED_AT on, a window of the ids seen before it: the two kinds draw a new id's initial row
    differently (the tier: a function of the id; in memory: of the slot), so the runs compare
    bit for bit on the ids both hold."""
    pool = torch.randint(-(2**62), 2**62, (24,), generator=seeded_generator("xchg-pool")) * 2
    g = seeded_generator("xchg", rank, step)
    lengths = random_lengths(BAGS, 3, g)
    drawn = torch.randint(0, 8, (int(lengths.sum()),), generator=g) + 5 * step
    if step < SAVED_AT:
        ids = pool[drawn % 24]
    else:
        seen = torch.unique(
            torch.cat([batch(r, s)[0].values() for r in (0, 1) for s in range(SAVED_AT)])
        )
        ids = seen[drawn % seen.numel()]
    return KeyedJaggedTensor(["f"], ids, lengths=lengths), torch.randn(BAGS, dim, generator=g)


def wrap(
    ctx: RankContext,
    kind: str,
    root: str,
    *,
    optimizer: str = "exact_row_wise_adagrad",
    dim: int = DIM,
    capacity: int | None = None,
) -> DistributedModelParallel:
    """`kind`: `<kernel>` (table_wise on the last rank) or `<kernel>:row_wise`."""
    kernel, _, sharding = kind.partition(":")
    tier = kernel != "fused"
    if capacity is None:
        capacity = CACHE * (2 if sharding else 1) if tier else MEMORY
    torch.manual_seed(7)  # an in-memory table's slots start from torch's RNG
    model = RawModel(capacity, dim)
    where = (
        row_wise(compute_kernel=kernel)
        if sharding
        else table_wise(rank=ctx.world_size - 1, compute_kernel=kernel)
    )
    table = construct_module_sharding_plan(model.sparse, {"raw": where}, world_size=ctx.world_size)
    if tier:
        table["raw"] = dataclasses.replace(
            table["raw"], key_value_params=KeyValueParams(ssd_storage_directory=root)
        )
    spec = FusedOptimSpec(optimizer=EmbOptimType(optimizer), learning_rate=0.1)
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": table}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
    )


def train(dmp: DistributedModelParallel, rank: int, first: int, last: int) -> None:
    for step in range(first, last):
        dmp(batch(rank, step)).backward()


def table_of(dmp: DistributedModelParallel, path: str = "sparse") -> tuple[Tensor, Tensor]:
    """This rank's `(ids, rows)` of the table (sorted ids; rows: weight | optimizer state),
    read from the tier's store or the in-memory table's slots; empty where it has none."""
    sharded = dmp.sharded_modules[path]
    part = sharded.dynamic_tables.table("raw")  # type: ignore[union-attr]
    cache = getattr(part, "cache", None)
    if cache is not None:
        ids = store_ids(cache)
        return ids, torch.from_numpy(cache.store.read(ids.numpy()))
    lookups = sharded._lookup_modules_of("raw")  # type: ignore[operator]
    if not lookups:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, DIM + 1)
    fused, offset = lookups[0]
    slots = torch.nonzero(part.occupied).reshape(-1)
    weight = sharded.embedding_bags["raw"].weight.detach()[slots]  # type: ignore[index]
    state = [v[offset + slots] for v in fused.optimizer_state().values()]
    state = [v.unsqueeze(1) if v.dim() == 1 else v for v in state]
    ids, order = torch.sort(part.slot_ids[slots])
    return ids, torch.cat([weight, *state], dim=1)[order]


def merged(tables: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Every rank's part of a table as one `(ids, rows)`, sorted by id."""
    ids, order = torch.sort(torch.cat([t[0] for t in tables]))
    return ids, torch.cat([t[1] for t in tables])[order]


def swap_run(ctx: RankContext, root: str, first_kind: str, then_kind: str) -> list[object]:
    """`first_kind` trained STEPS straight; `first_kind` trained SAVED_AT steps, saved, loaded
    into `then_kind`, trained on to STEPS. Returns both tables and the saved / loaded ones."""
    straight = wrap(ctx, first_kind, f"{root}/s")
    train(straight, ctx.rank, 0, STEPS)
    first = wrap(ctx, first_kind, f"{root}/f")
    train(first, ctx.rank, 0, SAVED_AT)
    save(f"{root}/ckpt", first, {"fused": first.fused_optimizer})
    again = wrap(ctx, then_kind, f"{root}/a")
    load(f"{root}/ckpt", again, {"fused": again.fused_optimizer})
    loaded = table_of(again)
    train(again, ctx.rank, SAVED_AT, STEPS)
    misses = getattr(again.sharded_modules["sparse"].dynamic_tables.table("raw"), "cache", None)
    return [table_of(straight), table_of(again), table_of(first), loaded, misses is not None]


def load_run(ctx: RankContext, root: str, kind: str) -> tuple[Tensor, Tensor]:
    dmp = wrap(ctx, kind, f"{root}/one-{ctx.world_size}")
    load(f"{root}/ckpt", dmp, {"fused": dmp.fused_optimizer})
    return table_of(dmp)


@pytest.mark.parametrize(
    ("first_kind", "then_kind"),
    [
        ("fused", "dram_virtual_table"),
        ("fused:row_wise", "ssd_virtual_table"),
        ("fused", "ssd_virtual_table:row_wise"),
        ("dram_virtual_table", "fused"),
        ("ssd_virtual_table:row_wise", "fused"),
        ("dram_virtual_table", "fused:row_wise"),
    ],
)
def test_train_save_swap_kind_train_on_is_bit_for_bit(  # type: ignore[no-untyped-def]
    pool_factory, tmp_path, first_kind, then_kind
):
    root = str(tmp_path)
    got = pool_factory(2).run(swap_run, root, first_kind, then_kind)
    straight = merged([g[0] for g in got])
    again = merged([g[1] for g in got])
    saved = merged([g[2] for g in got])
    loaded = merged([g[3] for g in got])
    assert saved[0].numel() > CACHE  # more ids than a tier's cache holds
    assert torch.equal(saved[0], loaded[0]) and torch.equal(saved[1], loaded[1])
    assert torch.equal(straight[0], again[0])
    assert torch.equal(straight[1], again[1])
    # The same checkpoint into one rank (2 -> 1), of the kind it was loaded into.
    one = pool_factory(1).run(load_run, root, then_kind.partition(":")[0])[0]
    assert torch.equal(one[0], saved[0]) and torch.equal(one[1], saved[1])


def one_rank_save(ctx: RankContext, root: str, kind: str) -> tuple[Tensor, Tensor]:
    dmp = wrap(ctx, kind, f"{root}/one")
    train(dmp, ctx.rank, 0, SAVED_AT)
    save(f"{root}/ckpt", dmp, {"fused": dmp.fused_optimizer})
    return table_of(dmp)


@pytest.mark.parametrize(
    ("first_kind", "then_kind"),
    [("fused", "ssd_virtual_table:row_wise"), ("dram_virtual_table", "fused:row_wise")],
)
def test_one_rank_checkpoint_loads_into_two_ranks_of_the_other_kind(  # type: ignore[no-untyped-def]
    pool_factory, tmp_path, first_kind, then_kind
):
    root = str(tmp_path)
    saved = pool_factory(1).run(one_rank_save, root, first_kind)[0]
    parts = pool_factory(2).run(load_run, root, then_kind)
    assert all(p[0].numel() for p in parts)  # both row_wise parts hold ids
    loaded = merged(parts)
    assert torch.equal(saved[0], loaded[0]) and torch.equal(saved[1], loaded[1])


def refusals(ctx: RankContext, root: str) -> list[str]:
    """Loads refused: dim 8 into dim 4 and SGD into row-wise Adagrad, each way; a tier of 24
    ids into an in-memory table of 8 slots (then loaded with evict_to_fit)."""
    out = []
    for kind, other in (("fused", "dram_virtual_table"), ("dram_virtual_table", "fused")):
        for name, options in (("dim", {"dim": 8}), ("sgd", {"optimizer": "exact_sgd"})):
            dmp = wrap(ctx, kind, f"{root}/{kind}-{name}", **options)  # type: ignore[arg-type]
            dmp(batch(ctx.rank, 0, options.get("dim", DIM))).backward()  # type: ignore[arg-type]
            save(f"{root}/{kind}-{name}-ckpt", dmp, {"fused": dmp.fused_optimizer})
            target = wrap(ctx, other, f"{root}/{other}-{name}-t")
            try:
                load(f"{root}/{kind}-{name}-ckpt", target, {"fused": target.fused_optimizer})
                out.append("")
            except Exception as e:  # PeerError on the ranks that did not fail
                out.append(str(e))
    tier = wrap(ctx, "dram_virtual_table", f"{root}/big")
    train(tier, ctx.rank, 0, STEPS)
    save(f"{root}/big-ckpt", tier, {"fused": tier.fused_optimizer})
    small = wrap(ctx, "fused", f"{root}/small", capacity=8)
    try:
        load(f"{root}/big-ckpt", small, {"fused": small.fused_optimizer})
        out.append("")
    except Exception as e:  # PeerError on the ranks that did not fail
        out.append(str(e))
    load(f"{root}/big-ckpt", small, {"fused": small.fused_optimizer}, evict_to_fit=True)
    fresh = wrap(ctx, "dram_virtual_table", f"{root}/fresh")  # holds no id yet
    save(f"{root}/fresh-ckpt", fresh, {"fused": fresh.fused_optimizer})
    emptied = wrap(ctx, "fused", f"{root}/emptied")
    train(emptied, ctx.rank, 0, 1)
    load(f"{root}/fresh-ckpt", emptied, {"fused": emptied.fused_optimizer})
    return [*out, table_of(tier), table_of(small), table_of(emptied)]  # type: ignore[list-item]


def column_split(ctx: RankContext, root: str) -> list[object]:
    """A table placed column_wise in memory (2 blocks): with row-wise Adagrad (state per
    block) refused into a tier and from one; with Adagrad (state per element) loaded."""
    out: list[object] = []
    for optimizer in ("exact_row_wise_adagrad", "exact_adagrad"):
        torch.manual_seed(7)
        model = RawModel(MEMORY, DIM)
        plan = construct_module_sharding_plan(
            model.sparse, {"raw": column_wise(ranks=[0, 1])}, world_size=2
        )
        spec = FusedOptimSpec(optimizer=EmbOptimType(optimizer), learning_rate=0.1)
        columns = DistributedModelParallel(
            model,
            env=ShardingEnv.from_process_group(ctx.pg),
            plan=ShardingPlan(plan={"sparse": plan}),
            sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
        )
        train(columns, ctx.rank, 0, SAVED_AT)
        save(f"{root}/{optimizer}-columns", columns, {"fused": columns.fused_optimizer})
        tier = wrap(ctx, "dram_virtual_table", f"{root}/{optimizer}", optimizer=optimizer)
        train(tier, ctx.rank, 0, SAVED_AT)
        save(f"{root}/{optimizer}-tier", tier, {"fused": tier.fused_optimizer})
        for path, target in ((f"{optimizer}-columns", tier), (f"{optimizer}-tier", columns)):
            try:
                load(f"{root}/{path}", target, {"fused": target.fused_optimizer})
                out.append(table_of(target)[0].numel())
            except Exception as e:  # PeerError on the ranks that did not fail
                out.append(str(e))
    torch.manual_seed(7)  # a column-split tier's checkpoint (per column block) into memory
    model = RawModel(CACHE, DIM)
    where = column_wise(ranks=[0, 1], compute_kernel="dram_virtual_table")
    plan = construct_module_sharding_plan(model.sparse, {"raw": where}, world_size=2)
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    split = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
    )
    train(split, ctx.rank, 0, 1)
    save(f"{root}/split", split, {"fused": split.fused_optimizer})
    memory = wrap(ctx, "fused", f"{root}/m", optimizer="exact_sgd")
    try:
        load(f"{root}/split", memory, {"fused": memory.fused_optimizer})
        out.append("")
    except ValueError as e:
        out.append(str(e))
    return out


def test_column_wise_with_row_wise_state_is_refused(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(column_split, str(tmp_path))
    for rank in got:
        for refused in rank[:2]:
            assert isinstance(refused, str) and "'raw'" in refused, refused
            assert "column_wise" in refused and "per column block" in refused, refused
        assert isinstance(rank[3], int) and rank[3] > 0, rank[3]  # each block holds the ids
    assert got[1][2] == got[1][3]  # the tier's owner holds as many ids as were saved
    for rank in got:
        assert "'raw'" in rank[4] and "column-split raw-id tier" in rank[4], rank[4]


def test_refusals_on_every_rank_and_evict_to_fit(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(refusals, str(tmp_path))
    for rank in got:
        dims, optims, capacity = rank[0:4:2], rank[1:4:2], rank[4]
        assert all("'raw'" in e and "embedding_dim 8" in e for e in dims), dims
        assert all("'raw'" in e and "optimizer" in e for e in optims), optims
        assert "'raw'" in capacity and "capacity 8" in capacity, capacity
        assert "evict_to_fit=True" in capacity and "num_embeddings >=" in capacity, capacity
    tier_ids, tier_rows = got[1][5]
    kept_ids, kept_rows = got[1][6]
    assert tier_ids.numel() > 8 and torch.equal(kept_ids, tier_ids[-8:])  # ties: largest ids
    assert all(rank[7][0].numel() == 0 for rank in got)  # an empty tier empties the table
    where = torch.searchsorted(tier_ids, kept_ids)
    assert torch.equal(tier_ids[where], kept_ids) and torch.equal(tier_rows[where], kept_rows)


def root_swap(ctx: RankContext, root: str) -> list[tuple[Tensor, Tensor]]:
    """The collection itself as the model (plan key ""): in memory -> tier -> in memory."""
    out: list[tuple[Tensor, Tensor]] = []
    for k, kernel in enumerate(("fused", "ssd_virtual_table", "fused")):
        torch.manual_seed(7)
        ebc = RawModel(MEMORY if kernel == "fused" else CACHE, DIM).sparse
        plan = construct_module_sharding_plan(
            ebc, {"raw": table_wise(rank=0, compute_kernel=kernel)}, world_size=1
        )
        plan["raw"] = dataclasses.replace(
            plan["raw"], key_value_params=KeyValueParams(ssd_storage_directory=f"{root}/s{k}")
        )
        spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
        dmp = DistributedModelParallel(
            ebc,
            env=ShardingEnv.from_process_group(ctx.pg),
            plan=ShardingPlan(plan={"": plan}),
            sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
        )
        if k == 0:
            for step in range(2 * SAVED_AT):  # steps 0..2 of both ranks' batches
                kjt, coefficients = batch(step % 2, step // 2)
                (dmp(kjt).wait().values() * coefficients).sum().backward()  # type: ignore[operator]
        else:
            load(f"{root}/{k - 1}", dmp, {"fused": dmp.fused_optimizer})
        save(f"{root}/{k}", dmp, {"fused": dmp.fused_optimizer})
        out.append(table_of(dmp, ""))
    return out


def test_the_collection_as_the_model_swaps_too(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    memory, tier, back = pool_factory(1).run(root_swap, str(tmp_path))[0]
    assert memory[0].numel() > CACHE
    for got in (tier, back):
        assert torch.equal(got[0], memory[0]) and torch.equal(got[1], memory[1])
