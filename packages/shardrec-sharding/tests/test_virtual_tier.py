"""A dynamic (raw-id) table planned with TorchRec's `ssd_virtual_table` (RocksDB) or
`dram_virtual_table` (RAM), table-wise, one rank: the table's capacity is a row cache over a
store of every id's row; it trains exactly as the same table held in memory with every id's
initial row (`initial_rows`), through evictions on every step and ids that come back. And the
refusals: a virtual kernel on a static table or not table_wise / row_wise, a batch larger
than the cache.
A plain state_dict holds every stored id's row (shardrec_dmp's tests: save / load)."""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.dynamic.reset import table_seed
from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    kernel_notes,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator
from shardrec_tiered import CacheTooSmallError, initial_rows
from shardrec_tiered.raw_checkpoint import store_ids

DIM = 4
CAPACITY = 8
STEPS = 6
BAGS = 4


def raw_table(dynamic: bool = True) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="raw",
        num_embeddings=CAPACITY,
        embedding_dim=DIM,
        feature_names=["f"],
        dynamic=DynamicTableConfig(init_seed=3) if dynamic else None,
    )


def shard(kernel: str, store: pathlib.Path, spec: FusedOptimSpec, dynamic: bool = True):  # type: ignore[no-untyped-def]  # a sharded EBC
    ebc = EmbeddingBagCollection([raw_table(dynamic)])
    plan = construct_module_sharding_plan(
        ebc, {"raw": table_wise(rank=0, compute_kernel=kernel)}, world_size=1
    )
    plan["raw"] = dataclasses.replace(
        plan["raw"],
        key_value_params=KeyValueParams(ssd_storage_directory=str(store)),
        cache_params=CacheParams(algorithm=CacheAlgorithm.LFU),
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    return sharder.shard(ebc, plan, ShardingEnv.from_local(1, 0)), plan


def stream() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Raw ids (negatives, the int64 extremes) from a pool of 24, a window moving by 5 a
    step: at most 8 distinct per batch (the cache), evicting every step, ids coming back."""
    g = seeded_generator("virtual-pool")
    pool = torch.cat(
        [
            torch.randint(-(2**62), 2**62, (20,), generator=g) * 2,
            torch.tensor([-(2**63), 2**63 - 1, -1, 0]),
        ]
    )
    out = []
    for step in range(STEPS):
        g = seeded_generator("virtual-batch", step)
        lengths = random_lengths(BAGS, 4, g)
        ids = pool[(torch.randint(0, 8, (int(lengths.sum()),), generator=g) + 5 * step) % 24]
        out.append((ids, lengths, torch.randn(BAGS, DIM, generator=g)))
    return out


@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "dram_virtual_table"])
@pytest.mark.parametrize("optimizer", [EmbOptimType.EXACT_SGD, EmbOptimType.EXACT_ROWWISE_ADAGRAD])
def test_trains_exactly_as_in_memory(
    tmp_path: pathlib.Path, kernel: str, optimizer: EmbOptimType
) -> None:
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.1)
    sharded, plan = shard(kernel, tmp_path, spec)
    notes = kernel_notes(plan["raw"])  # its store directory and LFU are applied: one line
    assert len(notes) == 1 and "runs the raw-id tier" in notes[0], notes
    data = stream()
    keys = torch.cat([ids for ids, _, _ in data]).unique()
    table = raw_table()
    weight = initial_rows(
        keys,
        DIM,
        seed=table_seed(3, "raw"),
        low=table.get_weight_init_min(),
        high=table.get_weight_init_max(),
    )
    memory = BatchedFusedEmbeddingBag(
        [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=DIM, weight=weight)], spec
    )
    for ids, lengths, coefficients in data:
        kjt = KeyedJaggedTensor(["f"], ids, lengths=lengths)
        out = sharded(kjt).wait().values()
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        expected = memory(torch.searchsorted(keys, ids), offsets)
        assert torch.equal(out.detach(), expected.detach())
        (out * coefficients).sum().backward()
        (expected * coefficients).sum().backward()
    cache = sharded.dynamic_tables.table("raw").cache
    assert cache.misses > keys.numel()  # evicted ids came back
    cache.flush()
    rows = torch.from_numpy(cache.store.read(keys.numpy()))
    assert torch.equal(rows[:, :DIM], memory.split_embedding_weights()[0].detach())
    state = memory.optimizer_state()  # SGD: none; rowwise Adagrad: one column after the row
    assert list(state) == ([] if optimizer is EmbOptimType.EXACT_SGD else ["momentum1"])
    for tensor in state.values():
        assert torch.equal(rows[:, DIM], tensor)


def test_refusals(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    with pytest.raises(ValueError, match="runs raw-id \\(dynamic\\) tables only"):
        shard("ssd_virtual_table", tmp_path, spec, dynamic=False)
    ebc = EmbeddingBagCollection([raw_table()])
    with pytest.raises(ValueError, match="'ssd_virtual_table' is a TorchRec kernel"):
        construct_module_sharding_plan(
            ebc, {"raw": table_row_wise(0, compute_kernel="ssd_virtual_table")}, world_size=1
        )
    sharded, _ = shard("dram_virtual_table", tmp_path, spec)
    too_many = torch.arange(CAPACITY + 1) - 4
    kjt = KeyedJaggedTensor(["f"], too_many, lengths=torch.tensor([CAPACITY + 1]))
    with pytest.raises(CacheTooSmallError, match=r"table 'raw': a batch touches 9 distinct"):
        sharded(kjt).wait()
    trained = EmbeddingBagCollection([raw_table()])
    trained(KeyedJaggedTensor(["f"], torch.tensor([5, -5]), lengths=torch.tensor([2])))
    plan = construct_module_sharding_plan(
        trained, {"raw": table_wise(rank=0, compute_kernel="dram_virtual_table")}, world_size=1
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    with pytest.raises(ValueError, match="already holds ids in memory; shard it before training"):
        sharder.shard(trained, plan, ShardingEnv.from_local(1, 0))
    monkeypatch.setitem(sys.modules, "shardrec_kvstore", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install shardrec-kvstore"):
        shard("ssd_virtual_table", tmp_path / "other", spec)


def rank_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of `step`: both ranks draw from the same window of 8 raw ids (so
    the owner's one map call per step fits the cache), moving by 5 ids a step."""
    g = seeded_generator("virtual-pool")
    pool = torch.randint(-(2**62), 2**62, (24,), generator=g) * 2
    g = seeded_generator("virtual-rank-batch", rank, step)
    lengths = random_lengths(BAGS, 3, g)
    ids = pool[(torch.randint(0, 8, (int(lengths.sum()),), generator=g) + 5 * step) % 24]
    return ids, lengths, torch.randn(BAGS, DIM, generator=g)


def train_two_ranks(ctx: RankContext, store: str) -> dict[str, torch.Tensor] | None:
    """The table lives on rank 1 (`ssd_virtual_table`); every rank trains its own batches.
    Rank 1 returns the store's rows of every id it holds after a flush."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    ebc = EmbeddingBagCollection([raw_table()])
    plan = construct_module_sharding_plan(
        ebc, {"raw": table_wise(rank=1, compute_kernel="ssd_virtual_table")}, world_size=2
    )
    plan["raw"] = dataclasses.replace(
        plan["raw"], key_value_params=KeyValueParams(ssd_storage_directory=store)
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    sharded = sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))
    for step in range(STEPS):
        ids, lengths, coefficients = rank_batch(ctx.rank, step)
        out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths)).wait().values()
        (out * coefficients).sum().backward()
    cache = sharded.dynamic_tables.table("raw").cache
    if ctx.rank == 0:
        assert cache is None  # rank 1 owns the table
        return None
    keys = torch.cat([rank_batch(r, s)[0] for r in range(2) for s in range(STEPS)]).unique()
    cache.flush()
    rows = torch.from_numpy(cache.store.read(keys.numpy()))
    return {"keys": keys, "rows": rows, "misses": torch.tensor(cache.misses)}


def test_two_ranks_match_in_memory(pool_factory, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(train_two_ranks, str(tmp_path))
    assert got[0] is None
    keys, rows = got[1]["keys"], got[1]["rows"]
    assert int(got[1]["misses"]) > keys.numel()  # the cache evicted and ids came back
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    table = raw_table()
    weight = initial_rows(
        keys,
        DIM,
        seed=table_seed(3, "raw"),
        low=table.get_weight_init_min(),
        high=table.get_weight_init_max(),
    )
    memory = BatchedFusedEmbeddingBag(
        [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=DIM, weight=weight)], spec
    )
    for step in range(STEPS):
        parts = [rank_batch(r, step) for r in range(2)]  # rank 0's samples first
        ids = torch.cat([p[0] for p in parts])
        lengths = torch.cat([p[1] for p in parts])
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        out = memory(torch.searchsorted(keys, ids), offsets)
        (out * torch.cat([p[2] for p in parts])).sum().backward()
    assert_close(rows[:, :DIM], memory.split_embedding_weights()[0].detach())
    assert_close(rows[:, DIM], memory.optimizer_state()["momentum1"])


def test_sequence_collection_trains_exactly_as_in_memory(tmp_path: pathlib.Path) -> None:
    """An EmbeddingCollection's dynamic table on `dram_virtual_table`: each id's output row
    is its row (the reference: bags of one id each)."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    config = EmbeddingConfig(
        name="raw",
        num_embeddings=CAPACITY,
        embedding_dim=DIM,
        feature_names=["f"],
        dynamic=DynamicTableConfig(init_seed=3),
    )
    ec = EmbeddingCollection([config])
    plan = construct_module_sharding_plan(
        ec, {"raw": table_wise(rank=0, compute_kernel="dram_virtual_table")}, world_size=1
    )
    sharder = EmbeddingCollectionSharder(fused_params=spec.to_fused_params())
    sharded = sharder.shard(ec, plan, ShardingEnv.from_local(1, 0))
    data = stream()
    keys = torch.cat([ids for ids, _, _ in data]).unique()
    weight = initial_rows(
        keys,
        DIM,
        seed=table_seed(3, "raw"),
        low=config.get_weight_init_min(),
        high=config.get_weight_init_max(),
    )
    memory = BatchedFusedEmbeddingBag(
        [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=DIM, weight=weight)], spec
    )
    for step, (ids, lengths, _) in enumerate(data):
        out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths))["f"].values()
        expected = memory(torch.searchsorted(keys, ids), torch.arange(ids.numel() + 1))
        assert torch.equal(out.detach(), expected.detach()), step
        coefficients = torch.randn(ids.numel(), DIM, generator=seeded_generator("ec", step))
        (out * coefficients).sum().backward()
        (expected * coefficients).sum().backward()


def resume_plain(ctx: RankContext, root: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Straight STEPS steps vs 3 steps, state_dict, load_state_dict into a fresh module, the
    rest (one rank, RocksDB, row-wise Adagrad): the outputs, and the fused optimizer refuses
    a state_dict of only the cached rows."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    straight, _ = shard("ssd_virtual_table", pathlib.Path(root) / "s", spec)
    first, _ = shard("ssd_virtual_table", pathlib.Path(root) / "f", spec)
    again, _ = shard("ssd_virtual_table", pathlib.Path(root) / "a", spec)
    outs = []
    for step, (ids, lengths, coefficients) in enumerate(stream()):
        if step == 3:
            state = first.state_dict()
            assert state["dynamic_tables.tables.raw.tier.0.ids"].numel() > CAPACITY
            again.load_state_dict(state)
        kjt = KeyedJaggedTensor(["f"], ids, lengths=lengths)
        for module in (straight, first if step < 3 else again):
            out = module(kjt).wait().values()
            (out * coefficients).sum().backward()
            outs.append(out.detach())
    with pytest.raises(NotImplementedError, match=r"raw-id tier tables \['raw'\]"):
        again.fused_optimizer.state_dict()
    return [(outs[i], outs[i + 1]) for i in range(0, len(outs), 2)]


def test_plain_state_dict_resumes_bit_for_bit(pool_factory, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    for a, b in pool_factory(1).run(resume_plain, str(tmp_path))[0]:
        assert torch.equal(a, b)


def train_row_wise(ctx: RankContext, store: str) -> dict[str, torch.Tensor]:
    """The table row_wise over both ranks (`ssd_virtual_table`): each rank's part caches
    the ids its hash routes to it in its 8 rows; returns its store's ids and rows."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    table = dataclasses.replace(raw_table(), num_embeddings=2 * CAPACITY)
    ebc = EmbeddingBagCollection([table])
    plan = construct_module_sharding_plan(
        ebc, {"raw": row_wise(compute_kernel="ssd_virtual_table")}, world_size=2
    )
    plan["raw"] = dataclasses.replace(
        plan["raw"], key_value_params=KeyValueParams(ssd_storage_directory=store)
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    sharded = sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))
    for step in range(STEPS):
        ids, lengths, coefficients = rank_batch(ctx.rank, step)
        out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths)).wait().values()
        (out * coefficients).sum().backward()
    cache = sharded.dynamic_tables.table("raw").cache
    assert cache is not None and cache.slots == CAPACITY  # this rank's row block
    ids = store_ids(cache)
    return {"ids": ids, "rows": torch.from_numpy(cache.store.read(ids.numpy()))}


def test_row_wise_matches_in_memory(pool_factory, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(train_row_wise, str(tmp_path))
    assert all(part["ids"].numel() > 0 for part in got)  # both parts hold ids
    assert not set(got[0]["ids"].tolist()) & set(got[1]["ids"].tolist())
    keys, order = torch.sort(torch.cat([part["ids"] for part in got]))
    rows = torch.cat([part["rows"] for part in got])[order]
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    table = dataclasses.replace(raw_table(), num_embeddings=2 * CAPACITY)
    weight = initial_rows(
        keys,
        DIM,
        seed=table_seed(3, "raw"),
        low=table.get_weight_init_min(),
        high=table.get_weight_init_max(),
    )
    memory = BatchedFusedEmbeddingBag(
        [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=DIM, weight=weight)], spec
    )
    for step in range(STEPS):
        parts = [rank_batch(r, step) for r in range(2)]
        ids = torch.cat([p[0] for p in parts])
        lengths = torch.cat([p[1] for p in parts])
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        out = memory(torch.searchsorted(keys, ids), offsets)
        (out * torch.cat([p[2] for p in parts])).sum().backward()
    assert_close(rows[:, :DIM], memory.split_embedding_weights()[0].detach())
    assert_close(rows[:, DIM], memory.optimizer_state()["momentum1"])


# Column-split raw-id tiers (virtual_columns.py): a column block on each rank, each rank's
# cache over its block deciding every id's slot the same way as the other rank's.


def shard_columns(  # type: ignore[no-untyped-def]  # a sharded EBC
    ctx: RankContext,
    kernel: str,
    store: str,
    spec: FusedOptimSpec,
    ranks: tuple[int, ...] = (0, 1),
    **table: object,
):
    """`raw` (DIM 4) split into column blocks on `ranks` (`kernel:table_column_wise` for that
    type), `kernel` its compute kernel."""
    kernel, _, kind = kernel.partition(":")
    ebc = EmbeddingBagCollection([dataclasses.replace(raw_table(), **table)])
    split = table_column_wise if kind else column_wise
    plan = construct_module_sharding_plan(
        ebc,
        {"raw": split(ranks=list(ranks), compute_kernel=kernel)},
        world_size=2,
        local_world_size=2,
    )
    plan["raw"] = dataclasses.replace(
        plan["raw"],
        key_value_params=KeyValueParams(ssd_storage_directory=store),
        cache_params=CacheParams(algorithm=CacheAlgorithm.LFU),
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    return sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))


def train_columns(ctx: RankContext, kernel: str, store: str, optimizer: str) -> dict[str, object]:
    """STEPS steps of each rank's own batches through a cache of 8 rows (both ranks' ids of a
    step: the window of 8 moving by 5, evicting every step): this rank's outputs, and its
    store's ids and rows (its column block) after a flush."""
    spec = FusedOptimSpec(optimizer=EmbOptimType(optimizer), learning_rate=0.1)
    sharded = shard_columns(ctx, kernel, store, spec)
    outs = []
    for step in range(STEPS):
        ids, lengths, coefficients = rank_batch(ctx.rank, step)
        out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths)).wait().values()
        (out * coefficients).sum().backward()
        outs.append(out.detach())
    cache = sharded.dynamic_tables.table("raw").cache
    assert cache is not None and cache.slots == CAPACITY and cache.weight.shape[1] == DIM // 2
    ids = store_ids(cache)
    rows = torch.from_numpy(cache.store.read(ids.numpy()))
    return {"outs": outs, "ids": ids, "rows": rows, "misses": cache.misses}


@pytest.mark.parametrize(
    ("kernel", "optimizer"),
    [
        ("ssd_virtual_table", "exact_row_wise_adagrad"),
        ("dram_virtual_table:table_column_wise", "exact_sgd"),
    ],
)
def test_column_wise_matches_in_memory_blocks(  # type: ignore[no-untyped-def]
    pool_factory, tmp_path: pathlib.Path, kernel: str, optimizer: str
) -> None:
    """Each rank's block trains exactly as that block held in memory with every id's initial
    row, trained on both ranks' batches (row-wise Adagrad: one state per block's row, as the
    in-memory column-split table; SGD: the blocks side by side are the unsharded table held in
    memory); both ranks' stores hold the same ids."""
    got = pool_factory(2).run(train_columns, kernel, str(tmp_path), optimizer)
    keys = got[0]["ids"]
    assert torch.equal(keys, got[1]["ids"])  # the same decisions on both ranks
    assert got[0]["misses"] > keys.numel()  # evicted ids came back
    spec = FusedOptimSpec(optimizer=EmbOptimType(optimizer), learning_rate=0.1)
    table = raw_table()
    full = initial_rows(
        keys,
        DIM,
        seed=table_seed(3, "raw"),
        low=table.get_weight_init_min(),
        high=table.get_weight_init_max(),
    )
    half = DIM // 2
    blocks = [
        BatchedFusedEmbeddingBag(
            [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=half, weight=full[:, cols])],
            spec,
        )
        for cols in (slice(0, half), slice(half, DIM))
    ]
    unsharded = BatchedFusedEmbeddingBag(  # SGD: the blocks are the unsharded table's columns
        [FusedTableSpec(name="raw", num_rows=keys.numel(), dim=DIM, weight=full)], spec
    )
    for step in range(STEPS):
        parts = [rank_batch(r, step) for r in range(2)]
        ids = torch.cat([p[0] for p in parts])
        lengths = torch.cat([p[1] for p in parts])
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        coefficients = torch.cat([p[2] for p in parts])
        outs = [m(torch.searchsorted(keys, ids), offsets) for m in blocks]
        expected = torch.cat(outs, dim=1).detach()
        for rank in range(2):
            assert torch.equal(got[rank]["outs"][step], expected[rank * BAGS : (rank + 1) * BAGS])
        for b, out in enumerate(outs):
            (out * coefficients[:, b * half : (b + 1) * half]).sum().backward()
        whole = unsharded(torch.searchsorted(keys, ids), offsets)
        if optimizer == "exact_sgd":
            assert torch.equal(whole.detach(), expected)
        (whole * coefficients).sum().backward()
    if optimizer == "exact_sgd":
        stores = torch.cat([got[r]["rows"] for r in range(2)], dim=1)
        assert torch.equal(stores, unsharded.split_embedding_weights()[0].detach())
    for rank, block in enumerate(blocks):
        rows = got[rank]["rows"]
        assert torch.equal(rows[:, :half], block.split_embedding_weights()[0].detach())
        for i, state in enumerate(block.optimizer_state().values()):  # row-wise: one column
            assert torch.equal(rows[:, half + i], state)


def columns_vs_memory(
    ctx: RankContext, store: str, ranks: tuple[int, ...]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same column_wise plan (blocks on `ranks`), `ssd_virtual_table` vs the in-memory
    dynamic table (kernel fused), a capacity that never evicts, a constant initializer (the
    in-memory table draws initial rows by slot, the tier by id), row-wise Adagrad: both outputs
    of every step, then every id's row of this rank's blocks and its row-wise state."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    fixed = {"num_embeddings": 64, "weight_init_min": 0.125, "weight_init_max": 0.125}
    tier = shard_columns(ctx, "ssd_virtual_table", store, spec, ranks, **fixed)
    memory = shard_columns(ctx, "fused", f"{store}/m", spec, ranks, **fixed)
    pairs = []
    for step in range(STEPS):
        ids, lengths, coefficients = rank_batch(ctx.rank, step)
        kjt = KeyedJaggedTensor(["f"], ids, lengths=lengths)
        a, b = tier(kjt).wait().values(), memory(kjt).wait().values()
        (a * coefficients).sum().backward()
        (b * coefficients).sum().backward()
        pairs.append((a.detach(), b.detach()))
    cache = tier.dynamic_tables.table("raw").cache
    keys = store_ids(cache)
    rows = torch.from_numpy(cache.store.read(keys.numpy()))
    slots = memory.dynamic_tables.table("raw").find(keys)
    assert bool((slots >= 0).all())
    ((fused, _),) = memory._lookup_modules_of("raw")  # this rank's block, in memory
    pairs.append((rows[:, : DIM // 2], fused.split_embedding_weights()[0][slots].detach()))
    pairs.append((rows[:, DIM // 2], fused.optimizer_state()["momentum1"][slots]))
    return pairs


@pytest.mark.parametrize("ranks", [(0, 1), (0, 1, 0, 1)])  # (0, 1, 0, 1): two blocks a rank
def test_column_wise_equals_the_in_memory_dynamic_table(  # type: ignore[no-untyped-def]
    pool_factory, tmp_path: pathlib.Path, ranks: tuple[int, ...]
) -> None:
    for pairs in pool_factory(2).run(columns_vs_memory, str(tmp_path), ranks):
        for tier, memory in pairs:
            assert torch.equal(tier, memory)


def column_refusals(ctx: RankContext, store: str) -> list[str]:
    """A column-split tier leaving rank 1 without a block, refused on both ranks; a batch too
    large for the cache, refused on both ranks."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    ebc = EmbeddingBagCollection([raw_table()])
    plan = construct_module_sharding_plan(
        ebc, {"raw": column_wise(ranks=[0, 0], compute_kernel="dram_virtual_table")}, world_size=2
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
    with pytest.raises(ValueError, match=r"needs a column block on every rank") as e:
        sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))
    # A batch of more distinct ids (both ranks') than the cache: raised by every rank's cache
    # (the same decision), and the next batch trains.
    sharded = shard_columns(ctx, "dram_virtual_table", store, spec)
    many = torch.arange(5) + 10 * ctx.rank - 7
    with pytest.raises(CacheTooSmallError, match=r"a batch touches 10 distinct rows") as full:
        sharded(KeyedJaggedTensor(["f"], many, lengths=torch.tensor([5, 0, 0, 0])))
    ids, lengths, coefficients = rank_batch(ctx.rank, 0)
    out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths)).wait().values()
    (out * coefficients).sum().backward()
    return [str(e.value), str(full.value)]


def test_column_wise_refusals(pool_factory, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    got = pool_factory(2).run(column_refusals, str(tmp_path))
    assert got[0][0] == got[1][0] and "blocks on ranks [0] of 2" in got[0][0], got
    ebc = EmbeddingBagCollection([raw_table()])
    for other in (data_parallel(), table_row_wise(host_index=0)):  # types the tiers lack
        plan = construct_module_sharding_plan(ebc, {"raw": other}, world_size=1)
        with pytest.raises(ValueError, match=r"placed table_wise, row_wise, column_wise or table_"):
            dataclasses.replace(plan["raw"], compute_kernel="dram_virtual_table")


def sequence_columns(ctx: RankContext, kernel: str) -> list[torch.Tensor]:
    """An EmbeddingCollection's dynamic table column_wise over both ranks (constant initial
    rows, row-wise Adagrad, a capacity that never evicts): each step's output rows."""
    config = EmbeddingConfig(
        name="raw",
        num_embeddings=64,
        embedding_dim=DIM,
        feature_names=["f"],
        weight_init_min=0.125,
        weight_init_max=0.125,
        dynamic=DynamicTableConfig(init_seed=3),
    )
    ec = EmbeddingCollection([config])
    plan = construct_module_sharding_plan(
        ec, {"raw": column_wise(ranks=[0, 1], compute_kernel=kernel)}, world_size=2
    )
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    sharder = EmbeddingCollectionSharder(fused_params=spec.to_fused_params())
    sharded = sharder.shard(ec, plan, ShardingEnv.from_process_group(ctx.pg))
    outs = []
    for step in range(STEPS):
        ids, lengths, _ = rank_batch(ctx.rank, step)
        out = sharded(KeyedJaggedTensor(["f"], ids, lengths=lengths))["f"].values()
        g = seeded_generator("ec-columns", ctx.rank, step)
        (out * torch.randn(ids.numel(), DIM, generator=g)).sum().backward()
        outs.append(out.detach())
    return outs


def test_sequence_column_wise_equals_in_memory(pool_factory) -> None:  # type: ignore[no-untyped-def]
    pool = pool_factory(2)
    tier, memory = (
        pool.run(sequence_columns, "dram_virtual_table"),
        pool.run(sequence_columns, "fused"),
    )
    for rank in range(2):
        for a, b in zip(tier[rank], memory[rank], strict=True):
            assert torch.equal(a, b)


def columns_plain_state_dict(ctx: RankContext, root: str) -> list[torch.Tensor]:
    """column_wise, RocksDB, row-wise Adagrad: 3 steps, a plain state_dict (one entry per
    column block), load_state_dict into a fresh module, the rest == STEPS steps straight."""
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    straight = shard_columns(ctx, "ssd_virtual_table", f"{root}/s", spec)
    first = shard_columns(ctx, "ssd_virtual_table", f"{root}/f", spec)
    again = shard_columns(ctx, "ssd_virtual_table", f"{root}/a", spec)
    outs = []
    for step in range(STEPS):
        if step == 3:
            state = first.state_dict()
            block = f"col{2 * ctx.rank}_2.in{2 * ctx.rank}"
            assert state[f"dynamic_tables.tables.raw.tier.{block}.ids"].numel() > CAPACITY
            again.load_state_dict(state)
        ids, lengths, coefficients = rank_batch(ctx.rank, step)
        kjt = KeyedJaggedTensor(["f"], ids, lengths=lengths)
        for module in (straight, first if step < 3 else again):
            out = module(kjt).wait().values()
            (out * coefficients).sum().backward()
            outs.append(out.detach())
    return outs


def test_column_wise_plain_state_dict_resumes(pool_factory, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    for outs in pool_factory(2).run(columns_plain_state_dict, str(tmp_path)):
        for i in range(0, len(outs), 2):
            assert torch.equal(outs[i], outs[i + 1])
