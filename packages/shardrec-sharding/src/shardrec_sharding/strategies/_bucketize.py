"""Row bucketization: every id goes to the rank whose row block holds it (vectorized).

Segment j's ids are shifted into `[base_j, base_j + rows_j)` of one virtual id space, so one
`bucketize` over the sorted shard starts of every segment finds every id's shard at once:

```
segments  a (rows 10: blocks [0,5) r0, [5,10) r1)   b (rows 4: one block on r1)
starts    [0, 5, 10]      dest [0, 1, 1]
ids a: 7 -> 7 -> shard 1 (rank 1, local 2)     ids b: 3 -> 13 -> shard 2 (rank 1, local 3)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from shardrec_collectives import ShardingEnv
from shardrec_embedding import shift_ids
from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding._index_cache import IndexCache
from shardrec_sharding.layout import Segment, TableSharding
from shardrec_sharding.strategies._bucketize_native import ShardTable, native_bucketize


class RowBucketizer:
    """Splits a KJT's ids of `segments` by row block (see module docstring).

    Sends every rank every segment's key (named by the segment), with empty bags where the
    rank holds none of the segment's ids, so that every rank learns every rank's batch size.
    """

    def __init__(
        self, segments: Sequence[Segment], tables: Sequence[TableSharding], env: ShardingEnv
    ) -> None:
        self.segments = list(segments)
        self.keys = [s.name for s in segments]
        self.world = env.world_size
        self._key_tensors = IndexCache()
        table_of = {t.name: t for t in tables}
        starts: list[int] = []
        dest: list[int] = []
        bases: list[int] = []
        # per segment (block rows, index of its first shard) when its table's blocks are
        # `[k * block, (k + 1) * block)` (the last one may be shorter): shard = id // block
        blocks: list[tuple[int, int]] = []
        # the C pass's view (`_bucketize_native`): per segment its block rows (0: not
        # uniform), first shard and shard count; per shard its rows and rank
        c_block: list[int] = []
        c_first: list[int] = []
        c_count: list[int] = []
        c_ends: list[int] = []
        base = 0
        for s in segments:
            t = table_of[s.table]
            bases.append(base)
            held = sorted((x for x in t.shards if x.rows > 0), key=lambda x: x.row_offset)
            block = held[0].rows if held else 0
            if held and all(
                x.row_offset == k * block
                and (x.rows == block or (k == len(held) - 1 and x.rows < block))
                for k, x in enumerate(held)
            ):
                blocks.append((block, len(starts)))
                c_block.append(block)
            else:
                c_block.append(0)
            c_first.append(len(starts))
            c_count.append(len(held))
            for shard in held:
                starts.append(base + shard.row_offset)
                c_ends.append(shard.row_offset + shard.rows)
                dest.append(shard.rank)
            base += t.config.num_embeddings
        self._bases = bases
        self._blocks = blocks if len(blocks) == len(segments) else None
        self._starts = torch.tensor(starts, dtype=torch.int64, device=env.device)
        self._dest = torch.tensor(dest, dtype=torch.int64, device=env.device)
        shard_base = [bases[j] for j, n in enumerate(c_count) for _ in range(n)]
        # (the C pass indexes its per-rank rows by these ranks: all must be of this world)
        self._native: ShardTable | None = None
        if all(0 <= r < self.world for r in dest):
            self._native = ShardTable(
                block=torch.tensor(c_block, dtype=torch.int64),
                first=torch.tensor(c_first, dtype=torch.int64),
                count=torch.tensor(c_count, dtype=torch.int64),
                starts=torch.tensor(
                    [a - b for a, b in zip(starts, shard_base, strict=True)], dtype=torch.int64
                ),
                ends=torch.tensor(c_ends, dtype=torch.int64),
                rank=torch.tensor(dest, dtype=torch.int64),
            )

    def __call__(
        self,
        features: KeyedJaggedTensor,
        feature_pos: Mapping[str, int],
        with_order: bool = True,
        wire_dtype: torch.dtype | None = None,
    ) -> tuple[list[KeyedJaggedTensor], Tensor | None]:
        """Per destination rank, the KJT of its ids (shifted to its block); and `order`, the
        permutation of the segment-major ids (`cat` of each segment's ids) into sent order
        (None unless `with_order`). `wire_dtype`: an integer dtype the sent ids take instead of
        the input's (e.g. `torch.int32` when every table has fewer than 2**31 rows)."""
        batch = features.stride()
        keys = [feature_pos[s.feature] for s in self.segments]
        values = features.values()
        wire = values.dtype if wire_dtype is None else wire_dtype
        lengths = features.lengths().view(len(features.keys()), batch)
        lengths = lengths[self._key_tensors.get(keys, values.device)]
        weights = features.weights_or_none()
        native = None
        if values.device.type == "cpu" and self._native is not None:
            offset_per_key = features.offset_per_key()
            native = native_bucketize(
                values,
                [offset_per_key[k] for k in keys],
                [offset_per_key[k + 1] - offset_per_key[k] for k in keys],
                lengths.long(),
                self._native,
                self.world,
                wire,
                weights,
                with_order,
            )
        if native is not None:
            buckets = _Buckets(native.ids, native.weights, native.counts, native.totals)
            order = native.order
        else:
            buckets, order = self._torch(features, keys, lengths, with_order, wire)
        # One host read gives every destination's ids per key (the KJTs' `length_per_key`, which
        # the all-to-all header needs) and their totals: one sync instead of one per rank.
        per_key: list[list[int]] = buckets.totals.tolist()
        sizes = [sum(row) for row in per_key]
        sent_ids = buckets.rows(buckets.ids, sizes)
        sent_weights: Sequence[Tensor | None] = [None] * self.world
        if buckets.weights is not None:
            sent_weights = buckets.rows(buckets.weights, sizes)
        lengths_dtype = features.lengths().dtype
        per_rank = [
            KeyedJaggedTensor(
                self.keys,
                sent_ids[d],
                weights=sent_weights[d],
                lengths=buckets.counts[d].to(lengths_dtype),
                stride=batch,
                length_per_key=per_key[d],
            )
            for d in range(self.world)
        ]
        return per_rank, order

    def _torch(
        self,
        features: KeyedJaggedTensor,
        keys: list[int],
        lengths: Tensor,
        with_order: bool,
        wire: torch.dtype,
    ) -> tuple[_Buckets, Tensor | None]:
        """The buckets in torch operations (any device and dtype), and `order` if asked."""
        world = self.world
        batch = features.stride()
        num_segments = len(self.segments)
        values = features.values()
        offset_per_key = features.offset_per_key()
        segs = [values[offset_per_key[k] : offset_per_key[k + 1]] for k in keys]
        if self._blocks is not None:
            shard, local_ids = _divide(segs, self._blocks)
        else:
            ids = shift_ids(segs, self._bases)
            shard = torch.bucketize(ids, self._starts, right=True) - 1
            local_ids = ids - self._starts.index_select(0, shard)
        dest = self._dest.index_select(0, shard)
        bag_lengths = lengths.reshape(-1).long()
        place: Tensor | None = None
        order: Tensor | None = None
        if world <= _PARTITION_MAX_WORLD:
            counts, place = _partition(dest, bag_lengths, world)
        else:
            counts, order = _sort(dest, bag_lengths, world)

        def sent_order(x: Tensor) -> Tensor:
            if place is not None:
                return _scatter(x, place)
            assert order is not None
            return x.index_select(0, order)

        counts = counts.view(world, num_segments * batch)
        weights = features.weights_or_none()
        sent_weights = None
        if weights is not None:
            seg_weights = torch.cat(
                [weights[offset_per_key[k] : offset_per_key[k + 1]] for k in keys]
            )
            sent_weights = sent_order(seg_weights)
        if with_order and order is None:
            assert place is not None
            order = _scatter(torch.arange(place.numel(), device=place.device), place)
        totals = counts.view(world, num_segments, batch).sum(2)
        sent = _Buckets(sent_order(local_ids.to(wire)), sent_weights, counts, totals)
        return sent, order if with_order else None


@dataclasses.dataclass(frozen=True, eq=False)
class _Buckets:
    """The ids (and weights) sent to each rank: `ids` either `(world, n)`, rank d's in row d
    (the C pass), or 1-D, ranks one after the other (the torch path); `counts (world, S * B)`
    ids per (rank, segment, bag); `totals (world, S)` their sums per segment."""

    ids: Tensor
    weights: Tensor | None
    counts: Tensor
    totals: Tensor

    def rows(self, x: Tensor, sizes: list[int]) -> Sequence[Tensor]:
        """Rank d's first `sizes[d]` entries of `x` (laid out as `ids`)."""
        if x.dim() == 2:
            return [x[d, :size] for d, size in enumerate(sizes)]
        return torch.split(x, sizes)


# Up to this many ranks the ids are partitioned by destination with per-rank running counts
# (`_partition`); above, by a stable sort (`_sort`), whose cost does not grow with the world.
_PARTITION_MAX_WORLD = 4


def _partition(dest: Tensor, bag_lengths: Tensor, world: int) -> tuple[Tensor, Tensor]:
    """`(counts, place)`: `counts` as `_sort` returns it, and `place[i]`, where the i-th
    segment-major id goes in the sent order, without a sort: the ids of the destinations before
    its own plus the ids of its destination before it (a running count per destination).
    """
    n = dest.numel()
    device = dest.device
    bounds = torch.zeros(bag_lengths.numel() + 1, dtype=torch.int64, device=device)
    torch.cumsum(bag_lengths, 0, out=bounds[1:])
    place = torch.zeros(n, dtype=torch.int64, device=device)
    before = torch.zeros((), dtype=torch.int64, device=device)
    running = torch.zeros(n + 1, dtype=torch.int64, device=device)
    mine = torch.empty(n, dtype=torch.int64, device=device)  # 0 / 1: int64 arithmetic
    ends, begins = bounds[1:], bounds[:-1]
    counts = []
    for d in range(world):
        torch.eq(dest, d, out=mine)
        torch.cumsum(mine, 0, out=running[1:])  # ids among the first i going to rank d
        counts.append(running.index_select(0, ends) - running.index_select(0, begins))
        place.addcmul_(mine, running[1:] + (before - 1))
        before = before + running[n]
    return torch.cat(counts), place


def _divide(segs: Sequence[Tensor], blocks: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    """`(shard, local id)` of every id of `segs` (concatenated) whose table has uniform blocks
    (`blocks[j]`: block rows, index of segment j's first shard): a division and a remainder per
    segment instead of a binary search over every shard start."""
    total = sum(int(x.numel()) for x in segs)
    like = segs[0] if segs else torch.empty(0, dtype=torch.int64)
    shard = torch.empty(total, dtype=torch.int64, device=like.device)
    local = torch.empty(total, dtype=like.dtype, device=like.device)
    start = 0
    for seg, (block, first) in zip(segs, blocks, strict=True):
        end = start + int(seg.numel())
        torch.floor_divide(seg, block, out=shard[start:end])
        shard[start:end] += first
        torch.remainder(seg, block, out=local[start:end])
        start = end
    return shard, local


def _sort(dest: Tensor, bag_lengths: Tensor, world: int) -> tuple[Tensor, Tensor]:
    """`(counts, order)`: per (destination, bag) id counts, destination-major, and the stable
    sort of the ids by destination (each destination's ids stay in (segment, bag) order)."""
    bags = bag_lengths.numel()
    bag = torch.repeat_interleave(
        torch.arange(bags, device=dest.device), bag_lengths, output_size=dest.numel()
    )
    # index_add_ into a buffer of known size, not bincount: CUDA's bincount reads the
    # largest key on the host to size its output (a hidden sync).
    counts = torch.zeros(world * bags, dtype=torch.int64, device=dest.device)
    counts.index_add_(0, dest * bags + bag, torch.ones_like(dest))
    return counts, torch.sort(dest, stable=True).indices


def _scatter(values: Tensor, place: Tensor) -> Tensor:
    """`out[place[i]] = values[i]` (`place` a permutation)."""
    return torch.empty_like(values).index_copy_(0, place, values)
