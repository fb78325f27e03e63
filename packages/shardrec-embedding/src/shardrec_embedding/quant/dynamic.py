"""Dynamic (raw-id) tables in the quantized collections: the id map, scriptable.

A trained dynamic table keeps its id map when quantized: `ScriptableIdMap` is a frozen copy
of it (open addressing with linear probing over two int64 tensors, built once from the
table's `(ids, slots)`; the two tensors are its whole state, in the `state_dict`), whose
`forward(ids)` finds every id's slot with torch ops only: a probe loop over the batch,
vectorized, as many rounds as the longest probe among the batch's ids. No Python dict and
nothing of shardrec at run time, so a `torch.jit.script`ed and saved module runs where only
torch is installed.

`DynamicPooledLookup` wraps a pooled lookup (`PooledLookup`, or the sharded one) with the
same `forward` arguments: the dynamic features' raw ids become slots, ids without a slot are
dropped from their bags, and their bags then read what the table's `unknown_id` says (a zero
row, or its `default_row`); MEAN bags keep dividing by their full length (as the float
module in evaluation, docs/dynamic.md). `DynamicSequenceLookup` does the same for a sequence
lookup (`SequenceLookup`, or the sharded one): an id without a slot reads a zero row or the
table's `default_row` in its place.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Self

import torch
from torch import nn

from shardrec_embedding.configs import BaseEmbeddingConfig, PoolingType
from shardrec_embedding.dynamic import DynamicTables, UnknownIdPolicy
from shardrec_embedding.quant.lookup import SegmentMeta

__all__ = [
    "DynamicPooledLookup",
    "DynamicSequenceLookup",
    "IdMapped",
    "ScriptableIdMap",
    "probe_hash",
]


def probe_hash(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's fmix64 of each int64 (wrapping multiplies, logical right shifts)."""
    x = x ^ ((x >> 33) & 2147483647)
    x = x * -49064778989728563
    x = x ^ ((x >> 33) & 2147483647)
    x = x * -4265267296055464877
    return x ^ ((x >> 33) & 2147483647)


class ScriptableIdMap(nn.Module):
    """A read-only id -> slot map (see the module doc); `forward(ids)` -> `(N,)` int64 slots,
    -1 for an id it does not hold."""

    if TYPE_CHECKING:  # buffers, typed for mypy (TorchScript reads no such annotations)
        keys: torch.Tensor
        slots: torch.Tensor

    def __init__(self, num_buckets: int) -> None:
        super().__init__()
        if num_buckets < 2 or num_buckets & (num_buckets - 1):
            raise ValueError(f"ScriptableIdMap: num_buckets {num_buckets} must be a power of 2")
        self.register_buffer("keys", torch.zeros(num_buckets, dtype=torch.int64))
        self.register_buffer("slots", torch.full((num_buckets,), -1, dtype=torch.int64))
        self.mask = num_buckets - 1

    def fill(self, ids: torch.Tensor, slots: torch.Tensor) -> None:
        """Hold exactly `ids[i] -> slots[i]` (distinct ids, at most half the buckets)."""
        ids = ids.reshape(-1).to(device="cpu", dtype=torch.int64)
        slots = slots.reshape(-1).to(device="cpu", dtype=torch.int64)
        buckets = self.mask + 1
        if ids.numel() > buckets // 2:
            raise ValueError(
                f"ScriptableIdMap: {ids.numel()} ids do not fit {buckets} buckets at load 0.5"
            )
        keys = torch.zeros(buckets, dtype=torch.int64)
        table = torch.full((buckets,), -1, dtype=torch.int64)
        home = probe_hash(ids) & self.mask
        pending = torch.arange(ids.numel())
        probe = 0
        # Round r places every pending id whose r-th probe bucket is empty; of ids sharing
        # one bucket the first (lowest index) wins, the rest probe on: a linear-probing
        # insert, vectorized per round.
        while pending.numel():
            pos = (home[pending] + probe) & self.mask
            free = table[pos] < 0
            candidates, cand_pos = pending[free], pos[free]
            first = torch.full((buckets,), ids.numel(), dtype=torch.int64)
            first.scatter_reduce_(0, cand_pos, candidates, reduce="amin")
            won = first[cand_pos] == candidates
            table[cand_pos[won]] = slots[candidates[won]]
            keys[cand_pos[won]] = ids[candidates[won]]
            placed = torch.zeros(ids.numel(), dtype=torch.bool)
            placed[candidates[won]] = True
            pending = pending[~placed[pending]]
            probe += 1
        self.keys.copy_(keys)
        self.slots.copy_(table)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(torch.int64)
        pos = probe_hash(ids) & self.mask
        found = torch.full_like(ids, -1)
        active = torch.ones_like(ids, dtype=torch.bool)
        # At most half the buckets hold ids, so every probe sequence reaches its id or an
        # empty bucket: the loop ends, after as many rounds as the longest probe needed.
        while bool(active.any()):
            slot = self.slots[pos]
            hit = active & (slot >= 0) & (self.keys[pos] == ids)
            found = torch.where(hit, slot, found)
            active = active & ~hit & (slot >= 0)
            pos = (pos + 1) & self.mask
        return found


def _segments_of(lookup: nn.Module) -> SegmentMeta:
    segments = getattr(lookup, "segments")  # noqa: B009  # an nn.Module attribute
    assert isinstance(segments, SegmentMeta)
    return segments


def _buckets(capacity: int) -> int:
    need = max(2, 2 * capacity)
    return 1 << (need - 1).bit_length()


class IdMapped(nn.Module):
    """What both dynamic lookups share: the wrapped `lookup`, one `ScriptableIdMap` per
    dynamic table of `configs` (empty until `load_maps`) and the tables' default rows."""

    if TYPE_CHECKING:  # as in ScriptableIdMap
        segments: SegmentMeta
        check_ids: bool
        default_rows: torch.Tensor

    def __init__(self, lookup: nn.Module, configs: Sequence[BaseEmbeddingConfig]) -> None:
        super().__init__()
        self.lookup = lookup
        self.segments = _segments_of(lookup)
        self.check_ids = bool(getattr(lookup, "check_ids"))  # noqa: B009  # nn.Module attr
        dynamic = [c for c in configs if c.dynamic is not None]
        self.table_names = [c.name for c in dynamic]
        self.maps = nn.ModuleList([ScriptableIdMap(_buckets(c.num_embeddings)) for c in dynamic])
        widest = max([c.embedding_dim for c in dynamic], default=1)
        self.register_buffer("default_rows", torch.zeros(len(dynamic), widest))

    def _map(self, ids: torch.Tensor, table: int) -> torch.Tensor:
        """Slots of raw `ids` in dynamic table `table`'s map (-1: not held). A loop over the
        maps: TorchScript indexes a ModuleList only by a constant."""
        slots = ids
        for j, id_map in enumerate(self.maps):
            if j == table:
                slots = id_map(ids)
        return slots

    @torch.jit.unused
    def around(self, lookup: nn.Module) -> Self:
        """The same id maps in front of another lookup of the same segments (the sharded
        one: the map runs before the shards, which hold slots)."""
        twin = copy.copy(self)
        twin._modules = dict(self._modules)
        twin.lookup = lookup
        twin.segments = _segments_of(lookup)
        twin.check_ids = bool(getattr(lookup, "check_ids"))  # noqa: B009
        return twin

    @torch.jit.unused
    def load_maps(
        self, tables: DynamicTables | Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        """Copy the trained id maps (and default rows): from a float collection's
        `dynamic_tables`, or `{table: (ids, slots)}`."""
        default_rows = self.default_rows
        for j, name in enumerate(self.table_names):
            id_map = self.maps[j]
            assert isinstance(id_map, ScriptableIdMap)
            if isinstance(tables, DynamicTables):
                table = tables.table(name)
                ids, slots = table.items()
                row = table.default_row
                default_rows[j, : row.numel()] = row.to(default_rows.dtype)
            else:
                if name not in tables:
                    raise KeyError(f"no id map given for dynamic table {name!r}")
                ids, slots = tables[name]
            id_map.fill(ids, slots)


class DynamicPooledLookup(IdMapped):
    """`lookup` (a pooled lookup: `forward(values, lengths, weights, offset_per_key,
    feature_index, batch)`) with the dynamic segments' raw ids mapped to slots first.

    segment_tables / segment_dims: per output segment (in output order) its table and width;
    configs: the collection's tables (the dynamic ones get a `ScriptableIdMap`, empty until
    `load_maps`).
    """

    def __init__(
        self,
        lookup: nn.Module,
        segment_tables: Sequence[str],
        segment_dims: Sequence[int],
        configs: Sequence[BaseEmbeddingConfig],
    ) -> None:
        super().__init__(lookup, configs)
        by_name = {c.name: c for c in configs}
        self.dyn_segments: list[int] = []
        self.dyn_tables: list[int] = []
        self.mean: list[bool] = []
        self.use_default: list[bool] = []
        self.columns: list[int] = []
        self.dims: list[int] = []
        column = 0
        for s, (name, dim) in enumerate(zip(segment_tables, segment_dims, strict=True)):
            config = by_name[name]
            if config.dynamic is not None:
                self.dyn_segments.append(s)
                self.dyn_tables.append(self.table_names.index(name))
                self.mean.append(getattr(config, "pooling", None) is PoolingType.MEAN)
                self.use_default.append(config.dynamic.unknown_id is UnknownIdPolicy.DEFAULT_ROW)
                self.columns.append(column)
                self.dims.append(dim)
            column += dim

    def forward(
        self,
        values: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None,
        offset_per_key: list[int],
        feature_index: list[int],
        batch: int,
    ) -> torch.Tensor:
        num_keys = len(offset_per_key) - 1
        values = values.to(torch.int64).clone()
        new_lengths = lengths.clone()
        keep = torch.ones(values.numel(), dtype=torch.bool, device=values.device)
        bag_ids = torch.arange(batch, device=values.device)
        missing_weight: list[torch.Tensor] = []
        totals: list[torch.Tensor] = []
        for i, s in enumerate(self.dyn_segments):
            k = feature_index[s]
            a, b = offset_per_key[k], offset_per_key[k + 1]
            slots = self._map(values[a:b], self.dyn_tables[i])
            miss = slots < 0
            values[a:b] = torch.where(miss, torch.zeros_like(slots), slots)
            keep[a:b] = ~miss
            total = lengths[k * batch : (k + 1) * batch].to(torch.int64)
            bag = torch.repeat_interleave(bag_ids, total)
            w = miss.to(torch.float32)
            if weights is not None:
                w = w * weights[a:b].to(torch.float32)
            missing_weight.append(torch.zeros(batch, device=values.device).index_add_(0, bag, w))
            dropped = torch.zeros(batch, dtype=torch.int64, device=values.device)
            dropped = dropped.index_add_(0, bag, miss.to(torch.int64))
            new_lengths[k * batch : (k + 1) * batch] = (total - dropped).to(lengths.dtype)
            totals.append(total)
        values = values[keep]
        if weights is not None:
            weights = weights[keep]
        counts: list[int] = new_lengths.view(num_keys, batch).sum(1).tolist()
        new_offsets = [0]
        for n in counts:
            new_offsets.append(new_offsets[-1] + n)
        out: torch.Tensor = self.lookup(
            values, new_lengths, weights, new_offsets, feature_index, batch
        )
        for i in range(len(self.dyn_segments)):
            c, d = self.columns[i], self.dims[i]
            total = totals[i].clamp(min=1).to(out.dtype)
            block = out[:, c : c + d]
            if self.mean[i]:
                k = feature_index[self.dyn_segments[i]]
                kept = new_lengths[k * batch : (k + 1) * batch].to(out.dtype)
                block = block * (kept / total).unsqueeze(1)
            if self.use_default[i]:
                extra = missing_weight[i].to(out.dtype)
                if self.mean[i]:
                    extra = extra / total
                row = self.default_rows[self.dyn_tables[i], :d].to(out.dtype)
                block = block + extra.unsqueeze(1) * row.unsqueeze(0)
            out[:, c : c + d] = block
        return out


class DynamicSequenceLookup(IdMapped):
    """`lookup` (a sequence lookup: `forward(values, offset_per_key, feature_index)` -> per
    segment the `(N_s, D)` rows of its ids) with the dynamic segments' raw ids mapped to
    slots first; an id without a slot reads a zero row, or its table's `default_row` when
    the table's `unknown_id` is DEFAULT_ROW (the float module in evaluation).

    segment_tables: per output segment its table; configs: the collection's tables.
    """

    def __init__(
        self,
        lookup: nn.Module,
        segment_tables: Sequence[str],
        configs: Sequence[BaseEmbeddingConfig],
    ) -> None:
        super().__init__(lookup, configs)
        by_name = {c.name: c for c in configs}
        self.dyn_segments: list[int] = []
        self.dyn_tables: list[int] = []
        self.use_default: list[bool] = []
        self.dims: list[int] = []
        for s, name in enumerate(segment_tables):
            config = by_name[name]
            if config.dynamic is not None:
                self.dyn_segments.append(s)
                self.dyn_tables.append(self.table_names.index(name))
                self.use_default.append(config.dynamic.unknown_id is UnknownIdPolicy.DEFAULT_ROW)
                self.dims.append(config.embedding_dim)

    def forward(
        self, values: torch.Tensor, offset_per_key: list[int], feature_index: list[int]
    ) -> list[torch.Tensor]:
        values = values.to(torch.int64).clone()
        missing: list[torch.Tensor] = []
        for i, s in enumerate(self.dyn_segments):
            k = feature_index[s]
            a, b = offset_per_key[k], offset_per_key[k + 1]
            slots = self._map(values[a:b], self.dyn_tables[i])
            miss = slots < 0
            # slot 0 stands in for a missing id; its row is replaced below
            values[a:b] = torch.where(miss, torch.zeros_like(slots), slots)
            missing.append(miss)
        rows: list[torch.Tensor] = self.lookup(values, offset_per_key, feature_index)
        for i, s in enumerate(self.dyn_segments):
            got = rows[s]
            fill = torch.zeros(self.dims[i], dtype=got.dtype, device=got.device)
            if self.use_default[i]:
                fill = self.default_rows[self.dyn_tables[i], : self.dims[i]].to(got.dtype)
            rows[s] = torch.where(missing[i].unsqueeze(1), fill.unsqueeze(0), got)
        return rows
