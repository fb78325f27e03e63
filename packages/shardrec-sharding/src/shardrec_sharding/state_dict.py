"""Sharded tables in `state_dict()`: torch `ShardedTensor`s over the live local weights.

`state_dict()` of a sharded collection has the unsharded module's keys. A sharded table's
value is a `ShardedTensor` whose `local_shards()` are *views* of this rank's weight (one per
shard placed here, with the plan's `shard_offsets` / `shard_sizes`), and whose global metadata
lists every shard of the table; `torch.distributed.checkpoint` saves and loads it in place.
Data-parallel tables stay plain tensors (replicated).

`load_state_dict()` accepts, per sharded table, a `ShardedTensor` with this rank's shards
(e.g. the result of `state_dict()`, or one loaded by DCP) or the full `(rows, dim)` tensor (an
unsharded module's `state_dict()`), from which this rank takes its part.
docs/design/sharding-state-dict.md records why ShardedTensor rather than DTensor.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.distributed._shard.metadata import ShardMetadata as TorchShardMetadata
from torch.distributed._shard.sharded_tensor.api import ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import (
    ShardedTensorMetadata,
    TensorProperties,
)
from torch.distributed._shard.sharded_tensor.shard import Shard

from shardrec_collectives import ShardingEnv
from shardrec_planner import ShardingType
from shardrec_sharding.layout import LocalTable, TableSharding
from shardrec_tiered.checkpoint import StoreSlice

__all__ = ["ShardedStateDict"]


class ShardedStateDict:
    """The state_dict hooks of a sharded collection whose tables live under `attr`."""

    def __init__(self, tables: Sequence[TableSharding], env: ShardingEnv, attr: str) -> None:
        self._env = env
        self._attr = attr
        self._order = [t.name for t in tables]
        self._tables = [t for t in tables if t.sharding_type is not ShardingType.DATA_PARALLEL]
        self._local: dict[str, LocalTable | None] = {
            t.name: t.local(env.rank) for t in self._tables
        }

    def raw_id_tiers(self) -> list[str]:
        """The tables planned ssd_virtual_table / dram_virtual_table (virtual_tier.py)."""
        from shardrec_planner.kernel_choice import runs_virtual_tiered

        return [t.name for t in self._tables if runs_virtual_tiered(t.sharding)]

    def _key(self, prefix: str, table: str) -> str:
        return f"{prefix}{self._attr}.{table}.weight"

    def sharded_tensor(self, table: TableSharding, local: Tensor | None) -> ShardedTensor:
        """`table` as a ShardedTensor whose local shards view `local` (this rank's weight)."""
        config = table.config
        metas = [m for m in table.sharding.shards if all(s > 0 for s in m.shard_sizes)]
        shards: list[Shard] = []
        lt = self._local[table.name]
        if local is not None and lt is not None:
            start = 0
            for c0, n in lt.column_blocks:
                meta = next(
                    m
                    for m in metas
                    if m.rank == self._env.rank
                    and m.shard_offsets == (lt.row_offset, c0)
                    and m.shard_sizes[1] == n
                )
                shards.append(
                    Shard(
                        # A view when the block is all of the local weight; a copy (ShardedTensor
                        # wants contiguous shards) when several column blocks share it.
                        tensor=local[:, start : start + n].contiguous(),
                        metadata=_torch_meta(meta.shard_offsets, meta.shard_sizes, meta.placement),
                    )
                )
                start += n
        dtype = local.dtype if local is not None else torch.float32
        global_meta = ShardedTensorMetadata(
            shards_metadata=[
                _torch_meta(m.shard_offsets, m.shard_sizes, m.placement) for m in metas
            ],
            size=torch.Size([config.num_embeddings, config.embedding_dim]),
            tensor_properties=TensorProperties(dtype=dtype, requires_grad=False),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ShardedTensor announces its deprecation
            return ShardedTensor._init_from_local_shards_and_global_metadata(
                shards, global_meta, process_group=self._env.pg
            )

    def placed_slice(self, table: TableSharding, local: StoreSlice) -> StoreSlice:
        """A tiered table's local `StoreSlice` placed at its shards' global offsets, as
        `sharded_tensor` places an in-memory weight (checkpoints stream it from the store)."""
        lt = self._local[table.name]
        assert lt is not None
        blocks: list[tuple[int, int, Sequence[int]]] = []
        start = 0
        for c0, n in lt.column_blocks:
            blocks.append((start, n, (lt.row_offset, c0)))
            start += n
        size = (table.config.num_embeddings, table.config.embedding_dim)
        return local.placed(blocks, size)

    def state_to_sharded(
        self, table: str, value: Tensor | StoreSlice
    ) -> Tensor | ShardedTensor | StoreSlice:
        """An optimizer state tensor of `table` as a ShardedTensor when it is per row (see
        `fused_optimizer.ShardedFusedOptimizer`); other state (a step counter) unchanged.
        A tiered table's state (`StoreSlice`) is placed the same way, staying a slice."""
        t = next((x for x in self._tables if x.name == table), None)
        lt = self._local.get(table)
        if t is None or lt is None:
            return value
        if isinstance(value, StoreSlice):
            return self._place_state(t, lt, value)
        if value.dim() == 2 and tuple(value.shape) == (lt.rows, lt.dim):
            return self.sharded_tensor(t, value)
        full_width = all(s.cols == t.config.embedding_dim for s in t.shards if s.rows)
        if value.dim() == 1 and value.numel() == lt.rows and full_width:
            metas = [m for m in t.sharding.shards if all(n > 0 for n in m.shard_sizes)]
            mine = next(m for m in metas if m.rank == self._env.rank)
            global_meta = ShardedTensorMetadata(
                shards_metadata=[
                    _torch_meta(m.shard_offsets[:1], m.shard_sizes[:1], m.placement) for m in metas
                ],
                size=torch.Size([t.config.num_embeddings]),
                tensor_properties=TensorProperties(dtype=value.dtype, requires_grad=False),
            )
            shard = Shard(
                tensor=value,
                metadata=_torch_meta(mine.shard_offsets[:1], mine.shard_sizes[:1], mine.placement),
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ShardedTensor._init_from_local_shards_and_global_metadata(
                    [shard], global_meta, process_group=self._env.pg
                )
        if value.dim() == 1 and value.numel() == lt.rows:
            return self._per_holder(t, value)
        return value

    def _place_state(self, t: TableSharding, lt: LocalTable, value: StoreSlice) -> StoreSlice:
        """`state_to_sharded` of a tiered table's state slice (the same three cases)."""
        rows = t.config.num_embeddings
        if value.dim() == 2:
            return self.placed_slice(t, value)
        if all(s.cols == t.config.embedding_dim for s in t.shards if s.rows):
            return value.placed([(0, 1, (lt.row_offset,))], (rows,))
        holders = sorted({s.rank for s in t.shards if s.rows and s.cols})
        column = holders.index(self._env.rank)
        return value.placed([(0, 1, (0, column))], (rows, len(holders)), vector=False)

    def _per_holder(self, table: TableSharding, value: Tensor) -> ShardedTensor:
        """Row-wise state of a column-split table: one `(rows,)` column per rank holding the
        table, as a `(rows, holders)` ShardedTensor (restorable under the same plan)."""
        holders = sorted({s.rank for s in table.shards if s.rows and s.cols})
        rows = table.config.num_embeddings
        metas = [
            _torch_meta(
                (0, i), (rows, 1), next(m.placement for m in table.sharding.shards if m.rank == r)
            )
            for i, r in enumerate(holders)
        ]
        mine = metas[holders.index(self._env.rank)]
        global_meta = ShardedTensorMetadata(
            shards_metadata=metas,
            size=torch.Size([rows, len(holders)]),
            tensor_properties=TensorProperties(dtype=value.dtype, requires_grad=False),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ShardedTensor._init_from_local_shards_and_global_metadata(
                [Shard(tensor=value.unsqueeze(1), metadata=mine)],
                global_meta,
                process_group=self._env.pg,
            )

    def state_to_local(self, table: str, value: ShardedTensor) -> Tensor:
        """This rank's part of a per-row optimizer state ShardedTensor of `table`."""
        lt = self._local.get(table)
        if lt is None:
            raise ValueError(f"table {table!r} has no rows on rank {self._env.rank}")
        t = next(x for x in self._tables if x.name == table)
        size = value.metadata().size  # not value.size(): that warns of ShardedTensor's deprecation
        if len(size) == 2 and size[1] != t.config.embedding_dim:
            # per-holder row-wise state (see _per_holder): this rank's column
            return value.local_shards()[0].tensor.reshape(-1)
        if len(size) == 1:
            for s in value.local_shards():
                if s.metadata.shard_offsets[0] == lt.row_offset and s.tensor.numel() == lt.rows:
                    return s.tensor
            raise ValueError(
                f"table {table!r}: the optimizer state has no local shard at row {lt.row_offset}"
            )
        return _from_shards(table, value, lt)

    def to_sharded(
        self,
        module: nn.Module,
        state_dict: dict[str, object],
        prefix: str,
        local_metadata: object,
    ) -> None:
        """`state_dict` hook: replace each sharded table's local weight by its ShardedTensor."""
        for t in self._tables:
            key = self._key(prefix, t.name)
            local = state_dict.get(key)
            if isinstance(local, StoreSlice):  # a tiered table, streaming (checkpoint.py)
                state_dict[key] = self.placed_slice(t, local)
                continue
            state_dict[key] = self.sharded_tensor(t, local if isinstance(local, Tensor) else None)
        # A table with no rows here was added last: restore the module's table order (these
        # are the last keys of `state_dict` while this hook runs).
        ours = [self._key(prefix, name) for name in self._order]
        values = {k: state_dict.pop(k) for k in ours if k in state_dict}
        state_dict.update((k, values[k]) for k in ours if k in values)

    def to_local(
        self,
        module: nn.Module,
        state_dict: dict[str, object],
        prefix: str,
        *_unused: object,
    ) -> None:
        """`load_state_dict` pre-hook: turn each sharded table's value into this rank's weight.

        torch also passes local_metadata, strict and the missing / unexpected / error lists;
        this hook needs none of them (torch's own load reports the keys)."""
        for t in self._tables:
            key = self._key(prefix, t.name)
            if key not in state_dict:
                continue
            value = state_dict[key]
            lt = self._local[t.name]
            if lt is None:
                del state_dict[key]  # this rank holds no rows of the table
                continue
            if isinstance(value, StoreSlice):
                continue  # a tiered table's, written in place by a streaming load
            if isinstance(value, ShardedTensor):
                state_dict[key] = _from_shards(t.name, value, lt)
            elif isinstance(value, Tensor):
                expected = (t.config.num_embeddings, t.config.embedding_dim)
                if tuple(value.shape) != expected:
                    raise ValueError(
                        f"state_dict[{key!r}] has shape {tuple(value.shape)}; table "
                        f"{t.name!r} needs the full {expected} tensor or a ShardedTensor"
                    )
                state_dict[key] = lt.slice_of(value)


def _torch_meta(offsets: Sequence[int], sizes: Sequence[int], placement: str) -> TorchShardMetadata:
    return TorchShardMetadata(
        shard_offsets=list(offsets), shard_sizes=list(sizes), placement=placement
    )


def _from_shards(name: str, value: ShardedTensor, lt: LocalTable) -> Tensor:
    by_offset = {
        (s.metadata.shard_offsets[0], s.metadata.shard_offsets[1]): s.tensor
        for s in value.local_shards()
    }
    blocks: list[Tensor] = []
    for c0, n in lt.column_blocks:
        block = by_offset.get((lt.row_offset, c0))
        if block is None or tuple(block.shape) != (lt.rows, n):
            raise ValueError(
                f"table {name!r}: the ShardedTensor has no local shard at offsets "
                f"({lt.row_offset}, {c0}) of sizes ({lt.rows}, {n}); it was saved with another "
                "plan (load it through torch.distributed.checkpoint to reshard)"
            )
        blocks.append(block)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)
