"""Checkpoints of raw-id tier tables (`ssd_virtual_table` / `dram_virtual_table`, table_wise,
row_wise and column_wise: one entry per column block) through `shardrec_dmp.save` / `load`:
every id the store keeps is saved with its row and optimizer state; train N steps, save, load
into a fresh model, train M more == N + M straight, bit for bit, with a cache that evicts every
step (SGD, row-wise Adagrad; RocksDB and RAM). A checkpoint of 2 ranks loads into 1 rank
holding the same rows; the fused optimizer's plain state_dict refuses (it would hold only the
cached rows); refused on every rank: a checkpoint path inside the RocksDB store directory, one
whose rows have another width, a column-split table's row-wise state into ranks holding other
column blocks. (A checkpoint of the table held in memory loads into a table_wise / row_wise
tier: test_virtual_interchange.py.)"""

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
CAPACITY = 8
STEPS = 6
BAGS = 3


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, Tensor]:
    """Every rank draws from one window of 8 raw ids (the cache: the owner maps all ranks'
    ids at once), moving by 5 a step: rows evicted every step, ids coming back."""
    pool = torch.randint(-(2**62), 2**62, (24,), generator=seeded_generator("vckpt-pool")) * 2
    g = seeded_generator("vckpt", rank, step)
    lengths = random_lengths(BAGS, 3, g)
    ids = pool[(torch.randint(0, 8, (int(lengths.sum()),), generator=g) + 5 * step) % 24]
    return KeyedJaggedTensor(["f"], ids, lengths=lengths), torch.randn(BAGS, DIM, generator=g)


def wrap(ctx: RankContext, kernel: str, optimizer: str, store: str) -> DistributedModelParallel:
    """`kernel` names the plan too: `<kernel>` table_wise on the last rank,
    `<kernel>:row_wise` (a part of 8 rows per rank), or `<kernel>:column_wise` (two column
    blocks: one per rank on 2 ranks, both on rank 0 on 1 rank)."""
    kernel, _, sharding = kernel.partition(":")
    model = RawModel(CAPACITY * (2 if sharding == "row_wise" else 1), DIM)
    owner = ctx.world_size - 1
    where = {
        "row_wise": row_wise(compute_kernel=kernel),
        "column_wise": column_wise(
            ranks=[r % ctx.world_size for r in range(2)], compute_kernel=kernel
        ),
    }.get(sharding, table_wise(rank=owner, compute_kernel=kernel))
    table = construct_module_sharding_plan(model.sparse, {"raw": where}, world_size=ctx.world_size)
    table["raw"] = dataclasses.replace(
        table["raw"], key_value_params=KeyValueParams(ssd_storage_directory=store)
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


def table_of(dmp: DistributedModelParallel) -> tuple[Tensor, Tensor, int] | None:
    """(ids, store rows, cache misses) of the table's owner after a flush; None elsewhere."""
    sharded = dmp.sharded_modules["sparse"]
    cache = sharded.dynamic_tables.table("raw").cache  # type: ignore[union-attr]
    if cache is None:
        return None
    ids = store_ids(cache)
    return ids, torch.from_numpy(cache.store.read(ids.numpy())), cache.misses


def resume(ctx: RankContext, root: str, kernel: str, optimizer: str) -> list[object]:
    straight = wrap(ctx, kernel, optimizer, f"{root}/s")
    train(straight, ctx.rank, 0, STEPS)
    first = wrap(ctx, kernel, optimizer, f"{root}/f")
    train(first, ctx.rank, 0, 3)
    overlap = ""
    try:  # inside the owner's RocksDB directory: refused on every rank
        save(f"{root}/f/rank-{ctx.world_size - 1}/ckpt", first, {"fused": first.fused_optimizer})
    except Exception as e:
        overlap = str(e)
    save(f"{root}/ckpt", first, {"fused": first.fused_optimizer})
    saved = table_of(first)
    again = wrap(ctx, kernel, optimizer, f"{root}/a")
    load(f"{root}/ckpt", again, {"fused": again.fused_optimizer})
    loaded = table_of(again)
    train(again, ctx.rank, 3, STEPS)
    refused = ""
    try:
        again.fused_optimizer.state_dict()
    except NotImplementedError as e:
        refused = str(e)
    return [table_of(straight), table_of(again), saved, loaded, refused, overlap]


@pytest.mark.parametrize(
    ("kernel", "optimizer"),
    [
        ("ssd_virtual_table", "exact_row_wise_adagrad"),
        ("dram_virtual_table", "exact_sgd"),
        ("ssd_virtual_table:row_wise", "exact_row_wise_adagrad"),
        ("ssd_virtual_table:column_wise", "exact_sgd"),
        ("dram_virtual_table:column_wise", "exact_row_wise_adagrad"),
    ],
)
def test_resume_is_bit_for_bit_and_loads_into_one_rank(pool_factory, tmp_path, kernel, optimizer):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    got = pool_factory(2).run(resume, root, kernel, optimizer)
    if kernel.startswith("ssd_virtual_table"):  # RAM rows have no directory to overlap
        assert all("overlap" in rank[5] for rank in got), [rank[5] for rank in got]
    owners = [1] if ":" not in kernel else [0, 1]
    if not owners.count(0):
        assert got[0][0] is None  # rank 1 owns the table
    for part in owners:
        straight, again, saved, loaded, refused, _ = got[part]
        if len(owners) == 1:  # (a row_wise part of 8 rows need not evict)
            assert straight[2] > straight[0].numel()  # evicted ids came back
            assert saved[0].numel() > CAPACITY  # more ids than the cache holds were saved
        assert torch.equal(saved[0], loaded[0]) and torch.equal(saved[1], loaded[1])
        assert torch.equal(straight[0], again[0])
        assert torch.equal(straight[1], again[1])
        assert "fused_optimizer.state_dict()" in refused and "'raw'" in refused
    if kernel.endswith("column_wise"):
        check_columns_on_one_rank(pool_factory, root, kernel, optimizer, got)
        return
    one = pool_factory(1).run(load_one_rank, root, kernel, optimizer)[0]
    ids, order = torch.sort(torch.cat([got[p][2][0] for p in owners]))
    rows = torch.cat([got[p][2][1] for p in owners])[order]
    assert torch.equal(one[0], ids) and torch.equal(one[1], rows)


def check_columns_on_one_rank(pool_factory, root, kernel, optimizer, got) -> None:  # type: ignore[no-untyped-def]
    """A column_wise checkpoint (one entry per column block, both ranks' stores holding the
    same ids) loads into 1 rank holding both blocks: its rows are the blocks side by side.
    With a row-wise state (one per rank's row) that is refused on every rank."""
    ids = got[0][2][0]
    assert torch.equal(ids, got[1][2][0]) and ids.numel() > CAPACITY
    if optimizer == "exact_row_wise_adagrad":
        with pytest.raises(ValueError, match=r"saved per group of column blocks at columns 0 on"):
            pool_factory(1).run(load_one_rank, root, kernel, optimizer)
        return
    one = pool_factory(1).run(load_one_rank, root, kernel, optimizer)[0]
    assert torch.equal(one[0], ids)
    assert torch.equal(one[1], torch.cat([got[0][2][1], got[1][2][1]], dim=1))


def load_one_rank(ctx: RankContext, root: str, kernel: str, optimizer: str) -> object:
    dmp = wrap(ctx, kernel, optimizer, f"{root}/one")
    load(f"{root}/ckpt", dmp, {"fused": dmp.fused_optimizer})
    return table_of(dmp)


def refusals(ctx: RankContext, root: str) -> list[str]:
    """Load into a raw-id tier: a checkpoint saved with another optimizer (rows of another
    width). (One of the table held in memory loads: test_virtual_interchange.py.)"""
    sgd = wrap(ctx, "dram_virtual_table", "exact_sgd", f"{root}/s")
    train(sgd, ctx.rank, 0, 1)
    save(f"{root}/sgd", sgd, {"fused": sgd.fused_optimizer})
    out = []
    for path in ("sgd",):
        tier = wrap(ctx, "dram_virtual_table", "exact_row_wise_adagrad", f"{root}/t")
        try:
            load(f"{root}/{path}", tier, {"fused": tier.fused_optimizer})
            out.append("")
        except Exception as e:
            out.append(str(e))
    return out


def test_refusals_on_every_rank(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    for (width,) in pool_factory(2).run(refusals, str(tmp_path)):
        assert "raw-id rows of shape (" in width and "rows have 5 columns" in width, width
