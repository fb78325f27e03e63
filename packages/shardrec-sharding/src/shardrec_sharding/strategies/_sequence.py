"""The engines of a sharded EmbeddingCollection: one row per id, sent back to the id's rank.

Every id's row must return to the rank that sent the id, in the order it was sent
(`sequence_all_to_all`), so each engine sends uniquely named keys and remembers, on the
sender, where each segment's rows land in what comes back:

- placed (table_wise, column_wise, table_column_wise): key `<segment>#<shard>` goes to the
  shard's rank, which returns the shard's columns of every id; column blocks are put side by
  side on arrival. All column blocks of one strategy must have one width (one all-to-all).
- row blocks (row_wise, table_row_wise): ids bucketized by row block; rows come back in sent
  (destination-major) order and are put back in id order by the inverse permutation.
- data_parallel (in `data_parallel`): a local lookup.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from shardrec_collectives import (
    Awaitable,
    ExchangeCapacity,
    kjt_all_to_all,
    sequence_all_to_all,
)
from shardrec_embedding import PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding.layout import Segment
from shardrec_sharding.lookup import LocalLookup, LookupSegment, LookupTable
from shardrec_sharding.strategies._bucketize import RowBucketizer
from shardrec_sharding.strategies._kjt import empty_kjt
from shardrec_sharding.strategies._local import held_lookup
from shardrec_sharding.types import LocalBatch, SequenceInput, StrategyArgs

__all__ = ["PlacedSequence", "RowSequence"]


def _rename(
    features: KeyedJaggedTensor, keys: Sequence[str], indices: Sequence[int]
) -> KeyedJaggedTensor:
    """The keys at `indices` of `features` (repeats allowed) under the new names `keys`."""
    if not indices:
        return empty_kjt([], features)
    picked = features.permute(list(indices))
    return KeyedJaggedTensor(
        list(keys),
        picked.values(),
        weights=picked.weights_or_none(),
        lengths=picked.lengths(),
        stride=features.stride(),
    )


class _SequenceEngine:
    """What both engines share: their segments, and sending the per-rank KJTs."""

    carries_errors = True

    def __init__(self, args: StrategyArgs) -> None:
        self.sharding_type: ShardingType = args.sharding_type
        self.env = args.env
        self._capacity = ExchangeCapacity()  # the ids' bytes per pair of ranks
        self.qcomm_codecs = args.qcomm_codecs  # of the sequence all-to-all (None: exact)
        self.segments: list[Segment] = [s for t in args.tables for s in t.segments]

    def _send(
        self,
        per_rank: list[KeyedJaggedTensor],
        batch: LocalBatch,
        key_index: tuple[int, ...],
        order: Tensor | None = None,
    ) -> Awaitable[SequenceInput]:
        # Deferred: the headers are read when the result is waited (the pipeline's overlap).
        pending = kjt_all_to_all(
            self.env, per_rank, error=batch.error, capacity=self._capacity, defer=True
        )
        counts: tuple[int, ...] = ()  # (with an error, never used: the wait raises)
        if batch.error is None:
            lengths = batch.features.length_per_key()
            counts = tuple(lengths[batch.feature_pos[s.feature]] for s in self.segments)
        return pending.then(
            lambda kjt: SequenceInput(
                features=kjt,
                key_index=key_index,
                layout=pending.layout,
                counts=counts,
                order=order,
            )
        )


class PlacedSequence(_SequenceEngine):
    """Shards holding all rows; one key per (segment, shard) (see module docstring)."""

    def __init__(self, args: StrategyArgs) -> None:
        super().__init__(args)
        tables, env = args.tables, args.env
        widths = {sh.cols for t in tables for sh in t.shards if sh.rows and sh.cols}
        if len(widths) > 1:
            raise ValueError(
                f"{args.sharding_type.value} tables {[t.name for t in tables]} of an "
                f"EmbeddingCollection have shards of widths {sorted(widths)}; use one width"
            )
        self.width = widths.pop() if widths else 0
        # per rank: (segment position, shard column offset) of each key it receives
        self._keys_per_rank: list[list[tuple[int, int]]] = [[] for _ in range(env.world_size)]
        for j, s in enumerate(self.segments):
            t = next(x for x in tables if x.name == s.table)
            for sh in t.shards:
                if sh.rows and sh.cols:
                    self._keys_per_rank[sh.rank].append((j, sh.col_offset))
        local_tables: list[LookupTable] = []
        index: dict[str, int] = {}
        for t in tables:
            local = t.local(env.rank, pooling=PoolingType.SUM)
            if local is not None:
                index[t.name] = len(local_tables)
                local_tables.append(args.make_table(t, local))
        own = self._keys_per_rank[env.rank]
        self._column_start: list[int] = []
        lookup_segments = []
        for j, c0 in own:
            lt = local_tables[index[self.segments[j].table]].local
            start, pos = 0, 0
            for b0, n in lt.column_blocks:
                if b0 == c0:
                    start = pos
                pos += n
            self._column_start.append(start)
            lookup_segments.append(LookupSegment(index[self.segments[j].table], lt.dim))
        self.lookup = LocalLookup(local_tables, lookup_segments, env.device)

    def _name(self, j: int, c0: int) -> str:
        return f"{self.segments[j].name}#{c0}"

    def input_dist(self, batch: LocalBatch) -> Awaitable[SequenceInput]:
        features, feature_pos = batch.features, batch.feature_pos
        per_rank = []
        for keys in self._keys_per_rank:
            names = [self._name(j, c0) for j, c0 in keys]
            if batch.error is None:
                idx = [feature_pos[self.segments[j].feature] for j, _ in keys]
                per_rank.append(_rename(features, names, idx))
            else:
                per_rank.append(empty_kjt(names, features))
        key_index = tuple(range(len(self._keys_per_rank[self.env.rank])))
        return self._send(per_rank, batch, key_index)

    def compute(self, dist_input: SequenceInput) -> Tensor:
        kjt = dist_input.features
        rows = self.lookup.rows(kjt.values(), kjt.offset_per_key(), dist_input.key_index)
        blocks = [r[:, c : c + self.width] for r, c in zip(rows, self._column_start, strict=True)]
        if not blocks:
            return torch.zeros(0, self.width, device=kjt.values().device)
        return torch.cat(blocks)

    def output_dist(self, local: Tensor, dist_input: SequenceInput) -> Awaitable[dict[int, Tensor]]:
        assert dist_input.layout is not None
        pending = sequence_all_to_all(self.env, local, dist_input.layout, codecs=self.qcomm_codecs)
        counts = dist_input.counts

        def assemble(received: Tensor) -> dict[int, Tensor]:
            sizes = [counts[j] for keys in self._keys_per_rank for j, _ in keys]
            parts = torch.split(received, sizes)
            blocks: dict[int, list[tuple[int, Tensor]]] = {}
            k = 0
            for keys in self._keys_per_rank:
                for j, c0 in keys:
                    blocks.setdefault(j, []).append((c0, parts[k]))
                    k += 1
            return {
                self.segments[j].index: torch.cat([b for _, b in sorted(v, key=lambda x: x[0])], 1)
                for j, v in blocks.items()
            }

        return pending.then(assemble)


class RowSequence(_SequenceEngine):
    """Row blocks; ids bucketized, rows returned in id order (see module docstring)."""

    def __init__(self, args: StrategyArgs) -> None:
        super().__init__(args)
        self._bucketize = RowBucketizer(self.segments, args.tables, args.env)
        self.lookup, _ = held_lookup(args, self.segments, PoolingType.SUM)

    def input_dist(self, batch: LocalBatch) -> Awaitable[SequenceInput]:
        order: Tensor | None = None
        if batch.error is None:
            per_rank, order = self._bucketize(batch.features, batch.feature_pos)
        else:
            per_rank = [empty_kjt(self._bucketize.keys, batch.features)] * self.env.world_size
        key_index = tuple(range(len(self.segments)))
        return self._send(per_rank, batch, key_index, order)

    def compute(self, dist_input: SequenceInput) -> Tensor:
        kjt = dist_input.features
        rows = self.lookup.rows(kjt.values(), kjt.offset_per_key(), dist_input.key_index)
        return torch.cat(rows)

    def output_dist(self, local: Tensor, dist_input: SequenceInput) -> Awaitable[dict[int, Tensor]]:
        assert dist_input.layout is not None and dist_input.order is not None
        pending = sequence_all_to_all(self.env, local, dist_input.layout, codecs=self.qcomm_codecs)
        order = dist_input.order
        counts = dist_input.counts

        def assemble(received: Tensor) -> dict[int, Tensor]:
            inverse = torch.empty_like(order)
            inverse[order] = torch.arange(order.numel(), device=order.device)
            in_id_order = received.index_select(0, inverse)
            parts = torch.split(in_id_order, list(counts))
            return {s.index: p for s, p in zip(self.segments, parts, strict=True)}

        return pending.then(assemble)
