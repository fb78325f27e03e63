"""Dynamic tables planned `ssd_virtual_table` / `dram_virtual_table`: the raw-id tier, sharded.

A dynamic table placed table_wise (or row_wise: one part per rank, each with its own cache and
store) already has its raw ids routed to their owner part, whose id map gives them slots of an
ordinary fused table of `capacity` rows (dynamic.py). With a virtual-table kernel the owner's
map is a `RowCache` over those very rows instead (`TieredShardedDynamicTable`): the fused
table's `capacity` rows are the cache, a store holds every id's row and optimizer state
(RocksDB on disk, or RAM), evicted rows are written back, an id that returns reads its row
back, an id never seen starts from its initial row (a pure function of the id,
`shardrec_tiered.initial_rows`). Nothing is rejected or reset, so the lookup, the fused
optimizer and the output path are unchanged. Checkpoints: every stored id's row
(`shardrec_tiered.raw_checkpoint`); in-flight batches pin their rows (`_CacheMap`).
docs/tiered.md.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from shardrec_embedding import BaseEmbeddingConfig
from shardrec_embedding.dynamic import DynamicTable, DynamicTables, IdSlotMap
from shardrec_embedding.dynamic.in_flight import Hold
from shardrec_embedding.dynamic.reset import table_seed
from shardrec_embedding.fused import BatchedFusedEmbeddingBag
from shardrec_optim import state_shapes
from shardrec_planner import EmbeddingComputeKernel, ParameterSharding
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_planner.kernel_choice import runs_virtual_tiered
from shardrec_sharding.dynamic import ShardedDynamicTable
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.virtual_columns import (
    COLUMN_SPLIT,
    ColumnRows,
    block_entries,
    check_blocks,
    load_column_state,
    local_columns,
)
from shardrec_tiered import (
    CachePolicy,
    KeyValueRows,
    MemoryRows,
    RawIdRows,
    RowCache,
    StoreLayout,
    default_store_dir,
)
from shardrec_tiered.raw_checkpoint import load_rows, tier_entries, tier_parts

__all__ = [
    "TieredShardedDynamicTable",
    "attach_virtual_tiers",
    "owns",
    "part_class",
    "virtual_store",
]


class _CacheMap(DynamicTable):
    """A `DynamicTable` whose local id -> slot step is a row cache's `admit`.

    In-flight batches: a training map pins its slots in the cache (a train pipeline maps
    batch i+1 before batch i's backward, which must find batch i's rows where it looked them
    up); the lookup of the batch (`computed`) hands the pins to its outputs, released by their
    backward (or when their graph is freed; at once when nothing requires grad)."""

    cache: RowCache | None = None
    column_blocks: tuple[tuple[int, int], ...] = ()
    """A column-split table: `(col_offset, cols)` of this rank's blocks (virtual_columns.py)."""

    def map_ids(self, ids: Tensor, *, training: bool) -> Tensor:
        if self.cache is None:
            raise RuntimeError(f"table {self.name!r}: its raw-id tier has no cache attached")
        if training:
            self._counters["steps"] += 1  # the batch's step: its lookup finds its pins by it
        if ids.numel() == 0:
            return torch.empty(0, dtype=torch.int64)
        unique, inverse = torch.unique(ids, return_inverse=True)
        slots = self.cache.admit(unique, pin=training)
        if training:
            self.cache.mark_dirty(slots)  # the backward of this batch updates them
            self._pins()[self._counters["steps"]] = slots
        return slots[inverse]

    def _pins(self) -> dict[int, Tensor]:
        """Step -> the cache slots its mapped batch pinned (until its lookup's backward)."""
        pins: dict[int, Tensor] = self.__dict__.setdefault("_tier_pins", {})
        return pins

    def computed(self, step: int, outputs: Sequence[Tensor]) -> None:
        """The training lookup of the batch mapped at `step` ran: its pins last until the
        backward through `outputs` (class docstring)."""
        pins = self._pins().pop(step, None)
        cache = self.cache
        if pins is None or cache is None:
            return
        nodes = [t.grad_fn for t in outputs if t.requires_grad and t.grad_fn is not None]
        if not nodes:
            cache.unpin(pins)
            return
        hold = Hold(lambda: cache.unpin(pins))

        def release(*_: object) -> None:
            hold.release()

        for node in nodes:
            node.register_hook(release)

    def release_tier_pins(self) -> None:
        """Unpin every mapped batch whose lookup has not run (batches a pipeline dropped)."""
        pins = self._pins()
        while pins and self.cache is not None:
            self.cache.unpin(pins.popitem()[1])


class TieredShardedDynamicTable(ShardedDynamicTable, _CacheMap):
    """`ShardedDynamicTable` (routing, exchanges) whose owner maps ids through the row cache
    (`_CacheMap`, next in the method order)."""


def part_class(table: TableSharding) -> type[ShardedDynamicTable]:
    """The `ShardedDynamicTable` class of `table`'s plan entry."""
    return TieredShardedDynamicTable if runs_virtual_tiered(table.sharding) else ShardedDynamicTable


def attach_virtual_tiers(
    tables: Sequence[TableSharding],
    dyn: DynamicTables,
    lookups_of: Callable[[str], list[tuple[BatchedFusedEmbeddingBag, int]]],
    source: nn.Module,
    table_modules: nn.ModuleDict,
    rank: int,
) -> None:
    """Give each raw-id tier part this rank owns its cache and store (module docstring)."""
    for t in tables:
        if not runs_virtual_tiered(t.sharding):
            continue
        part = dyn.table(t.name)
        assert isinstance(part, TieredShardedDynamicTable)
        before = getattr(source, "dynamic_tables", None)
        if isinstance(before, DynamicTables) and bool(before.table(t.name).occupied.any()):
            raise ValueError(
                f"table {t.name!r}: planned {t.sharding.compute_kernel.value} but the module "
                "already holds ids in memory; shard it before training (a raw-id tier starts "
                "from its store)"
            )
        columns = t.sharding_type in COLUMN_SPLIT
        if columns:
            check_blocks(t, part.env.world_size)
        part.column_blocks = local_columns(t, rank) if columns else ()
        _checkpoint_hooks(part, rank, part.column_blocks)
        found = lookups_of(t.name)
        if not found:
            continue  # another rank owns the table
        module, row = found[0]
        part.cache = _cache(t, module, row, rank, part.capacity)


def _cache(
    t: TableSharding, module: BatchedFusedEmbeddingBag, row: int, rank: int, rows: int
) -> RowCache:
    """The cache of this rank's part of `t`: its `rows` local slots (a row_wise table: this
    rank's row block) over the part's rows in `module` from `row`."""
    config: BaseEmbeddingConfig = t.config
    index = [s.name for s in module.table_specs].index(t.name)
    weight = module.split_embedding_weights()[index].detach()
    width = weight.shape[1]  # a column-split table: this rank's blocks
    state = {k: v[row : row + rows] for k, v in module.optimizer_state().items()}
    widths = tuple(
        (name, width if len(shape) == 2 else 1)
        for name, shape in state_shapes(module.spec.optimizer, 1, width).items()
    )
    layout = StoreLayout(table=t.name, num_rows=rows, dim=width, state=widths)
    policy, open_store = virtual_store(t.sharding, rank)
    dynamic = config.dynamic
    assert dynamic is not None
    seed, low, high = (
        table_seed(dynamic.init_seed, t.name),
        config.get_weight_init_min(),
        config.get_weight_init_max(),
    )
    store = (
        ColumnRows(
            open_store(layout),
            layout,
            seed=seed,
            low=low,
            high=high,
            blocks=local_columns(t, rank),
        )
        if t.sharding_type in COLUMN_SPLIT
        else RawIdRows(open_store(layout), layout, seed=seed, low=low, high=high)
    )
    buckets = 1 << max(1, (2 * rows - 1).bit_length())
    return RowCache(store, weight, state, policy, IdSlotMap(buckets))


def _checkpoint_hooks(
    part: TieredShardedDynamicTable, rank: int, blocks: Sequence[tuple[int, int]]
) -> None:
    """`part`'s state_dict holds every id its store keeps, with rows and optimizer state
    (`shardrec_tiered.raw_checkpoint`; a column-split table: per column block `blocks`,
    virtual_columns.py); a plain `load_state_dict` of such entries replaces the store's
    content (`shardrec_dmp.load` streams them instead: checkpoint_virtual)."""

    def save(module: nn.Module, state: dict[str, object], prefix: str, *_: object) -> None:
        if part.cache is not None:
            entries = (
                block_entries(part.cache, prefix, blocks)
                if blocks
                else tier_entries(part.cache, prefix, rank)
            )
            state.update(entries)

    def load(state: dict[str, object], prefix: str, *_: object) -> None:
        if blocks:
            if part.cache is not None:
                load_column_state(part.name, part.cache, blocks, state, prefix)
            return
        parts = [(ids[mine], rows[mine]) for ids, rows in tier_parts(state, prefix, part.name)
                 for mine in [owns(part, ids)]]  # fmt: skip
        if parts and part.cache is not None:
            load_rows(part.cache, parts)

    part._register_state_dict_hook(save)  # type: ignore[no-untyped-call]  # torch leaves it untyped
    part._register_load_state_dict_pre_hook(load)  # type: ignore[no-untyped-call]  # torch leaves it untyped


def owns(part: ShardedDynamicTable, ids: Tensor) -> Tensor:
    """Which raw `ids` this rank's part of the table owns (its routing: hash or bucket; all:
    table_wise)."""
    routing = part.routing
    rank = part.env.rank
    if rank not in routing.owners:
        return torch.zeros(ids.numel(), dtype=torch.bool)
    if len(routing.owners) == 1:
        return torch.ones(ids.numel(), dtype=torch.bool)
    return routing.part_of(ids) == routing.owners.index(rank)


def virtual_store(
    ps: ParameterSharding, rank: int
) -> tuple[CachePolicy, Callable[[StoreLayout], KeyValueRows]]:
    """The cache policy (`CacheParams.algorithm`) and the store factory of `rank`'s raw-id tier
    of a table planned `ssd_virtual_table` (RocksDB in
    `<KeyValueParams.ssd_storage_directory>/rank-<r>`, default `<cwd>/tier-store/rank-<r>`,
    from the optional shardrec-kvstore package) or `dram_virtual_table` (RAM)."""
    cache = ps.cache_params
    lfu = cache is not None and cache.algorithm is CacheAlgorithm.LFU
    policy = CachePolicy.LFU if lfu else CachePolicy.LRU
    if ps.compute_kernel is not EmbeddingComputeKernel.SSD_VIRTUAL_TABLE:
        return policy, lambda layout: MemoryRows(layout.stride)
    try:
        # Optional (it brings the RocksDB binary wheel): `pip install shardrec[kvstore]`.
        kvstore = importlib.import_module("shardrec_kvstore")
    except ImportError as e:
        raise ImportError(
            "compute kernel 'ssd_virtual_table' keeps rows in RocksDB through the "
            "shardrec-kvstore package, which is not installed: pip install shardrec-kvstore "
            "(or shardrec[kvstore]), or plan 'dram_virtual_table' (rows in RAM)"
        ) from e
    kv = ps.key_value_params
    directory = os.path.join(
        (kv.ssd_storage_directory if kv else None) or default_store_dir(), f"rank-{rank}"
    )

    def open_store(layout: StoreLayout) -> KeyValueRows:
        row_layout = kvstore.RowLayout(table=layout.table, dim=layout.dim, state=layout.state)
        store: KeyValueRows = kvstore.RocksRowStore(directory, row_layout)
        return store

    return policy, open_store
