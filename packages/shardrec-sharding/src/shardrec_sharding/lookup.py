"""Lookups over the local tables of one rank, table-batched.

Local tables sharing (dim, pooling, optimizer) are looked up by one kernel call: a
`BatchedFusedEmbeddingBag` (optimizer applied in backward) or a `DenseBatchedBag` (dense
gradients). Each lookup *segment* reads one key of a KJT through one local table:

```
received KJT keys  [f0, f1, f2]           segments (output order)   local tables
                                           0: key f1 -> table a      a (rows 0..49 of t0)
lengths (F * B,)  values (N,)              1: key f0 -> table b      b (all of t3)
                                           2: key f2 -> (none)       -> zeros
output (B, D_0 + D_1 + D_2), segment blocks side by side
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from shardrec_embedding import (
    GradWorkspace,
    PoolingType,
    allocate_packed,
    batched_embedding_bag,
    packed_weight,
    repack_,
    shift_ids,
)
from shardrec_embedding.fused import (
    BatchedFusedEmbeddingBag,
    FusedTable,
    FusedTableSpec,
    SegmentRead,
    segment_lookup,
    segment_lookup_unsupported,
)
from shardrec_optim import FusedOptimSpec
from shardrec_sharding._index_cache import IndexCache
from shardrec_sharding.layout import LocalTable
from shardrec_tiered import TieredFusedEmbeddingBag, TieredOptions

__all__ = ["DenseBatchedBag", "LocalLookup", "LookupSegment", "LookupTable"]

InitFn = Callable[[Tensor], object]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LookupTable:
    """One local table and how to fill and train it.

    weight: initial `(rows, dim)` values (a slice of a materialized table), or None to call
        `init_fn` on the local rows (a module on `meta`: one shard at a time, never the table).
    optimizer: the fused optimizer, or None for dense gradients.
    tier: rows on disk behind a cache (plan kernel key_value, `tiering.py`), or None.
    """

    local: LocalTable
    weight: Tensor | None
    init_fn: InitFn
    optimizer: FusedOptimSpec | None
    tier: TieredOptions | None = None


@dataclasses.dataclass(frozen=True)
class LookupSegment:
    """Segment reading through local table `table` (index into the lookup's tables; -1: this
    rank holds none of it, the segment is zeros) with output width `dim`."""

    table: int
    dim: int


class DenseBatchedBag(nn.Module):
    """Pooled lookup over packed tables that produces dense gradients (no optimizer inside)."""

    def __init__(
        self, tables: Sequence[LookupTable], pooling: PoolingType, device: torch.device
    ) -> None:
        super().__init__()
        rows = [t.local.rows for t in tables]
        dim = tables[0].local.dim
        views = allocate_packed(rows, dim, dtype=torch.float32, device=device)
        self.tables = nn.ModuleDict(
            {t.local.name: FusedTable(v) for t, v in zip(tables, views, strict=True)}
        )
        self.row_offsets = [sum(rows[:i]) for i in range(len(rows))]
        self.pooling = pooling
        self._workspace = GradWorkspace()
        with torch.no_grad():
            for t, w in zip(tables, self.split_embedding_weights(), strict=True):
                _fill(t, w)

    def split_embedding_weights(self) -> list[Tensor]:
        out: list[Tensor] = []
        for m in self.tables.values():
            w = m.weight
            assert isinstance(w, Tensor)
            out.append(w)
        return out

    def forward(self, ids: Tensor, offsets: Tensor, per_sample_weights: Tensor | None) -> Tensor:
        """ids: `(N,)` group rows; offsets: `(bags + 1,)`. Returns `(bags, D)` float32."""
        return batched_embedding_bag(
            self.split_embedding_weights(),
            ids,
            offsets,
            pooling=self.pooling,
            per_sample_weights=per_sample_weights,
            workspace=self._workspace,
        )


def _fill(table: LookupTable, weight: Tensor) -> None:
    with torch.no_grad():
        if table.weight is not None:
            weight.copy_(table.weight)
        else:
            table.init_fn(weight)


@dataclasses.dataclass(frozen=True)
class _Group:
    module: BatchedFusedEmbeddingBag | DenseBatchedBag | TieredFusedEmbeddingBag
    segments: tuple[int, ...]  # segment positions, output order
    row_offsets: tuple[int, ...]  # per segment: its table's first row in the group
    positions: tuple[int, ...]  # per segment: its table's index in the group


class LocalLookup:
    """Table-batched pooled lookup of `segments` over `tables` (module docstring).

    Not an `nn.Module`: the owner registers the per-table modules (`table_modules()`) under
    its own names, and moves the groups' optimizer state with `apply_`.
    """

    def __init__(
        self,
        tables: Sequence[LookupTable],
        segments: Sequence[LookupSegment],
        device: torch.device,
    ) -> None:
        self.segments = list(segments)
        Key = tuple[int, PoolingType, FusedOptimSpec | None, bool]
        by_key: dict[Key, list[int]] = {}
        for i, t in enumerate(tables):
            key = (t.local.dim, t.local.pooling, t.optimizer, t.tier is not None)
            by_key.setdefault(key, []).append(i)
        self.groups: list[_Group] = []
        for (_, pooling, optimizer, tiered), members in by_key.items():
            chosen = [tables[i] for i in members]
            module: BatchedFusedEmbeddingBag | DenseBatchedBag | TieredFusedEmbeddingBag
            if optimizer is None:
                module = DenseBatchedBag(chosen, pooling, device)
            else:
                specs = [
                    FusedTableSpec(
                        name=t.local.name,
                        num_rows=t.local.rows,
                        dim=t.local.dim,
                        pooling=pooling,
                        weight=t.weight,
                        init_fn=None if t.weight is not None else t.init_fn,
                    )
                    for t in chosen
                ]
                if tiered:
                    tiers = {t.local.name: t.tier for t in chosen if t.tier is not None}
                    module = TieredFusedEmbeddingBag(specs, optimizer, tiers)
                else:
                    # weight and optimizer state on 2 MB pages (shardrec_embedding.memory)
                    module = BatchedFusedEmbeddingBag(specs, optimizer, device=device)
            position = {tables[i].local.name: k for k, i in enumerate(members)}
            segs = [
                j
                for j, s in enumerate(segments)
                if s.table >= 0 and tables[s.table].local.name in position
            ]
            offsets = tuple(
                module.row_offsets[position[tables[segments[j].table].local.name]] for j in segs
            )
            places = tuple(position[tables[segments[j].table].local.name] for j in segs)
            self.groups.append(_Group(module, tuple(segs), offsets, places))
        self.dim = sum(s.dim for s in segments)
        self._key_tensors = IndexCache()

    def table_modules(self) -> dict[str, nn.Module]:
        """Local table name -> the module holding its `weight` Parameter."""
        return {name: m for g in self.groups for name, m in g.module.tables.items()}

    def fused_modules(self) -> list[BatchedFusedEmbeddingBag]:
        return [g.module for g in self.groups if isinstance(g.module, BatchedFusedEmbeddingBag)]

    def tiered_modules(self) -> list[TieredFusedEmbeddingBag]:
        return [g.module for g in self.groups if isinstance(g.module, TieredFusedEmbeddingBag)]

    def apply_(self, fn: Callable[[Tensor], Tensor]) -> None:
        """Apply a `Module._apply` function to the groups' buffers, then re-pack the weights
        (the owner moved them through `table_modules()`)."""
        for g in self.groups:
            g.module._apply(fn, recurse=False)
            if isinstance(g.module, TieredFusedEmbeddingBag):
                continue
            weights = g.module.split_embedding_weights()
            if weights[0].device.type != "meta" and packed_weight(weights) is None:
                repack_(weights)

    def prefetch(
        self,
        values: Tensor,
        offset_per_key: Sequence[int],
        key_index: Sequence[int],
        *,
        background: bool = False,
    ) -> None:
        """Load into the tiered groups' caches the rows that the coming lookup of these
        `values` (as `__call__` / `rows` take them) reads, and hold them until it; a no-op
        without tiered groups. background: on the groups' worker threads (returns at once)."""
        for g in self.groups:
            if not g.segments or not isinstance(g.module, TieredFusedEmbeddingBag):
                continue
            keys = [key_index[j] for j in g.segments]
            ids = shift_ids(
                [values[offset_per_key[k] : offset_per_key[k + 1]] for k in keys], g.row_offsets
            )
            g.module.prefetch(ids, background=background)

    def __call__(
        self,
        values: Tensor,
        lengths: Tensor,
        weights: Tensor | None,
        offset_per_key: Sequence[int],
        batch_size: int,
        key_index: Sequence[int],
    ) -> Tensor:
        """Pooled rows of every segment.

        values: `(N,)` local ids, key-major. lengths: `(F * batch_size,)`. weights: `(N,)`.
        offset_per_key: `(F + 1)` starts of each key in `values`. key_index: per segment, the
        key it reads. Returns `(batch_size, sum of segment dims)` float32.
        """
        if weights is None:
            fast = self._fused_segments(values, lengths, batch_size, key_index)
            if fast is not None:
                return fast
        blocks: list[Tensor | None] = [None] * len(self.segments)
        num_keys = len(offset_per_key) - 1
        per_key = lengths.view(num_keys, batch_size) if num_keys else lengths.view(0, batch_size)
        for g in self.groups:
            if not g.segments:
                continue
            keys = [key_index[j] for j in g.segments]
            ids = shift_ids(
                [values[offset_per_key[k] : offset_per_key[k + 1]] for k in keys], g.row_offsets
            )
            group_lengths = per_key[self._key_tensors.get(keys, lengths.device)]
            offsets = torch.zeros(group_lengths.numel() + 1, dtype=torch.int64, device=ids.device)
            torch.cumsum(group_lengths.reshape(-1), 0, out=offsets[1:])
            psw = None
            if weights is not None:
                psw = torch.cat([weights[offset_per_key[k] : offset_per_key[k + 1]] for k in keys])
            pooled = g.module(ids, offsets, psw)
            parts = pooled.view(len(keys), batch_size, pooled.shape[1]).unbind(0)
            for j, part in zip(g.segments, parts, strict=True):
                blocks[j] = part
        device = values.device
        out = [
            b if b is not None else torch.zeros(batch_size, s.dim, device=device)
            for b, s in zip(blocks, self.segments, strict=True)
        ]
        if not out:
            return torch.zeros(batch_size, 0, device=device)
        return out[0] if len(out) == 1 else torch.cat(out, dim=1)

    def _fused_segments(
        self, values: Tensor, lengths: Tensor, batch_size: int, key_index: Sequence[int]
    ) -> Tensor | None:
        """Every fused group in one `segment_lookup` straight into the output columns (no id
        shift, no concatenation, no gradient stack), or None where it does not apply."""
        groups = [g for g in self.groups if g.segments]
        if not groups or any(segment_lookup_unsupported(g.module, values) for g in groups):
            return None
        cols = [0]
        for s in self.segments:
            cols.append(cols[-1] + s.dim)
        reads = [
            SegmentRead(group=i, table=p, key=key_index[j], col=cols[j])
            for i, g in enumerate(groups)
            for j, p in zip(g.segments, g.positions, strict=True)
        ]
        modules = [g.module for g in groups if isinstance(g.module, BatchedFusedEmbeddingBag)]
        names = [(f"key {r.key}", modules[r.group].table_specs[r.table].name) for r in reads]
        # presort: the update's sort runs on a helper thread while this rank waits for the
        # pooled all-to-all (docs/bench/sharded.md, session 11)
        return segment_lookup(
            modules, reads, values, lengths, batch_size, cols[-1], names, presort=True
        )

    def rows(
        self, values: Tensor, offset_per_key: Sequence[int], key_index: Sequence[int]
    ) -> list[Tensor]:
        """Per-id rows of every segment (sequence lookups; tables built with SUM pooling).

        Returns per segment `(ids of its key, dim of its local table)` float32, as one-id bags
        so that the same fused / dense modules serve pooled and sequence lookups.
        """
        out: list[Tensor | None] = [None] * len(self.segments)
        for g in self.groups:
            if not g.segments:
                continue
            keys = [key_index[j] for j in g.segments]
            counts = [offset_per_key[k + 1] - offset_per_key[k] for k in keys]
            ids = shift_ids(
                [values[offset_per_key[k] : offset_per_key[k + 1]] for k in keys], g.row_offsets
            )
            offsets = torch.arange(ids.numel() + 1, device=ids.device)
            found = torch.split(g.module(ids, offsets, None), counts)
            for j, part in zip(g.segments, found, strict=True):
                out[j] = part
        return [
            r
            if r is not None
            else torch.zeros(
                offset_per_key[key_index[j] + 1] - offset_per_key[key_index[j]],
                s.dim,
                device=values.device,
            )
            for j, (r, s) in enumerate(zip(out, self.segments, strict=True))
        ]
