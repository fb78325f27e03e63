"""The engine of row_wise and table_row_wise: each rank holds a block of rows of a table.

Input: every id goes to the rank whose row block holds it, shifted to that block's local row
(bucketization, vectorized over all segments at once); every rank receives every segment's key,
with empty bags where it holds no rows. Each rank pools the rows it holds into a *partial* sum
for every sample of every rank; `reduce_scatter_pooled` sums the partials over ranks and gives
each rank its own samples. MEAN divides after that sum, by the bag sizes of the sample's rank
(the rank that knows them), so partial sums are never averaged twice.

```
table t (10 rows) on ranks 0, 1 (blocks of 5)     bag [2, 7, 9] of rank 0's sample
rank 0 gets bag [2]        -> partial row 2        reduce-scatter: row2 + row7 + row9
rank 1 gets bag [2, 4]     -> partial row 7 + 9    (MEAN: / 3 on rank 0)
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from shardrec_collectives import (
    Awaitable,
    ExchangeCapacity,
    kjt_all_to_all,
    reduce_scatter_pooled,
)
from shardrec_embedding import PoolingType
from shardrec_embedding.fused import gradient_pieces
from shardrec_planner import ShardingType
from shardrec_sharding._index_cache import IndexCache
from shardrec_sharding.strategies._bucketize import RowBucketizer
from shardrec_sharding.strategies._kjt import empty_kjt, pooled_lookup
from shardrec_sharding.strategies._local import consecutive_columns, held_lookup
from shardrec_sharding.types import DistInput, LocalBatch, StrategyArgs

_INT32_ROWS = 2**31 - 1


class RowBlockSharding:
    """Tables split into row blocks over some ranks (see module docstring)."""

    carries_errors = True

    def __init__(self, args: StrategyArgs) -> None:
        self.sharding_type: ShardingType = args.sharding_type
        tables, env, self.env = args.tables, args.env, args.env
        self._capacity = ExchangeCapacity()  # the id buckets' bytes per pair of ranks
        self.qcomm_codecs = args.qcomm_codecs  # of the reduce-scatter (None: exact)
        self._segments = [s for t in tables for s in t.segments]
        self._keys = [s.name for s in self._segments]
        self._bucketize = RowBucketizer(self._segments, tables, env)
        # local rows travel as int32 when every table's rows fit (half the bytes of int64 ids)
        fits = all(t.config.num_embeddings <= _INT32_ROWS for t in tables)
        self._wire: torch.dtype | None = torch.int32 if fits else None
        self._key_tensors = IndexCache()
        table_of = {t.name: t for t in tables}
        # partial sums; MEAN divides later
        self.lookup, _ = held_lookup(args, self._segments, PoolingType.SUM)
        self._key_index = tuple(range(len(self._segments)))
        self._mean = [table_of[s.table].pooling is PoolingType.MEAN for s in self._segments]
        columns, self.output_dim = consecutive_columns(self._segments)
        self.segment_columns: Mapping[int, Sequence[int]] = columns
        self.output_blocks: Sequence[int] = (self.output_dim,)

    def input_dist(self, batch: LocalBatch) -> Awaitable[DistInput]:
        features, error, feature_pos = batch.features, batch.error, batch.feature_pos
        if error is None:
            per_rank, _ = self._bucketize(
                features, feature_pos, with_order=False, wire_dtype=self._wire
            )
        else:
            # Ids may be out of range: send nothing; the header carries the error to every rank.
            per_rank = [empty_kjt(self._keys, features)] * self.env.world_size
        # Deferred: the headers are read when the result is waited (the pipeline's overlap).
        pending = kjt_all_to_all(
            self.env, per_rank, error=error, capacity=self._capacity, defer=True
        )
        own_lengths = None
        if any(self._mean) and error is None:
            keys = [feature_pos[s.feature] for s in self._segments]
            lengths = features.lengths().view(len(features.keys()), features.stride())
            own_lengths = lengths[self._key_tensors.get(keys, lengths.device)]
        key_index = self._key_index
        return pending.then(
            lambda kjt: DistInput(
                features=kjt,
                key_index=key_index,
                batch_size_per_rank=tuple(pending.layout.recv_stride_per_key_per_rank[0]),
                lengths=own_lengths,
            )
        )

    def compute(self, dist_input: DistInput) -> Tensor:
        return pooled_lookup(self.lookup, dist_input)

    def output_dist(self, local: Tensor, dist_input: DistInput) -> Awaitable[Tensor]:
        # the fused segment lookup's backward reads the reduce-scatter's gradient in two row
        # pieces where they lie (no copy into one tensor: session 12, docs/bench/sharded.md)
        pieces = gradient_pieces(local)
        pending = reduce_scatter_pooled(
            self.env,
            local,
            dist_input.batch_size_per_rank,
            codecs=self.qcomm_codecs,
            gradient_sink=None if pieces is None else pieces.put,
        )
        lengths = dist_input.lengths
        if lengths is None:
            return pending
        return pending.then(lambda pooled: self._divide_means(pooled, lengths))

    def _divide_means(self, pooled: Tensor, lengths: Tensor) -> Tensor:
        """MEAN segments of `pooled` `(B, D)` divided by their bag sizes `(S, B)`."""
        inverse = 1.0 / lengths.clamp(min=1).to(pooled.dtype)
        scales = [
            inverse[j].unsqueeze(1).expand(-1, s.dim)
            if mean
            else pooled.new_ones(()).expand(pooled.shape[0], s.dim)
            for j, (s, mean) in enumerate(zip(self._segments, self._mean, strict=True))
        ]
        return pooled * torch.cat(scales, dim=1)
