"""The engine of table_wise, column_wise and table_column_wise: whole rows on one rank.

Every shard holds all rows of some columns of a table, so a rank needs, for each of its local
tables, every id of the features the table reads. Input: each rank sends rank d the features
d's tables read (`kjt_all_to_all`). Output: rank d's pooled rows for every sample go back to the
sample's rank (`pooled_all_to_all_flat`), arriving rank-major, one `(B, D_r)` block per source
rank (`output_blocks`); the collection copies the blocks' columns into the unsharded module's
order (`segment_columns`, `_columns`).

```
rank 0 holds t0, t1[:, :4]     rank 1 holds t1[:, 4:]        received on every rank:
lookup (sum_s B_s, D0 + D1a)   lookup (sum_s B_s, D1b)       (B, D0 | D1a | D1b)
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from shardrec_collectives import (
    Awaitable,
    ExchangeCapacity,
    KeySelection,
    KJTAllToAllLayout,
    kjt_all_to_all,
    pooled_all_to_all_flat,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding.layout import LocalTable, Segment, TableSharding
from shardrec_sharding.lookup import LocalLookup, LookupSegment
from shardrec_sharding.strategies._kjt import empty_kjt, pooled_lookup, unique
from shardrec_sharding.types import DistInput, LocalBatch, StrategyArgs

_INT32_ROWS = 2**31 - 1  # the most rows whose ids fit in int32


class PlacedSharding:
    """Tables whose shards each hold all rows (see module docstring)."""

    carries_errors = True

    def __init__(self, args: StrategyArgs) -> None:
        self.sharding_type: ShardingType = args.sharding_type
        tables, env, self.env = args.tables, args.env, args.env
        self.qcomm_codecs = args.qcomm_codecs  # of the pooled all-to-all (None: exact)
        self._features_per_rank: list[list[str]] = []
        self.dim_per_rank: list[int] = []
        columns: dict[tuple[int, int], int] = {}
        mine: list[tuple[TableSharding, LocalTable]] = []
        position = 0
        for r in range(env.world_size):
            held: list[tuple[TableSharding, LocalTable]] = []
            for t in tables:
                local = t.local(r)
                if local is not None:
                    held.append((t, local))
            segs: list[tuple[Segment, LocalTable]] = [(s, lt) for t, lt in held for s in t.segments]
            self._features_per_rank.append(unique([s.feature for s, _ in segs]))
            self.dim_per_rank.append(sum(lt.dim for _, lt in segs))
            for s, lt in segs:
                for c0, n in lt.column_blocks:
                    for c in range(n):
                        columns[(s.index, c0 + c)] = position
                        position += 1
            if r == env.rank:
                mine = held
        self.output_dim = position
        self.output_blocks: Sequence[int] = tuple(self.dim_per_rank)
        self.segment_columns: Mapping[int, Sequence[int]] = {
            s.index: [columns[(s.index, c)] for c in range(s.dim)]
            for t in tables
            for s in t.segments
        }
        own_features = self._features_per_rank[env.rank]
        lookup_tables = [args.make_table(t, lt) for t, lt in mine]
        segments = [LookupSegment(i, lt.dim) for i, (t, lt) in enumerate(mine) for _ in t.segments]
        self._key_index = tuple(own_features.index(s.feature) for t, _ in mine for s in t.segments)
        # Ids are checked to be rows of their tables before they move (FeatureChecker), so with
        # fewer than 2**31 rows per table they travel as int32: half the bytes of int64 ids.
        small = all(t.config.num_embeddings <= _INT32_ROWS for t in tables)
        self._wire_dtype: torch.dtype | None = torch.int32 if small else None
        self.lookup = LocalLookup(lookup_tables, segments, env.device)
        # Learns the ids' bytes per pair of ranks: from the second batch on, the ids travel
        # with their header in one exchange.
        self._capacity = ExchangeCapacity()

    def input_dist(self, batch: LocalBatch) -> Awaitable[DistInput]:
        features, error = batch.features, batch.error
        send: KeySelection | list[KeyedJaggedTensor]
        if error is None:
            # One copy of the ids on the way out (views of the input's key segments,
            # concatenated into the send buffer), not a permuted KJT per rank and then the buffer.
            positions = [[batch.feature_pos[f] for f in feats] for feats in self._features_per_rank]
            send = KeySelection(
                features=features, keys_per_rank=positions, wire_dtype=self._wire_dtype
            )
        else:
            # The input is unusable: send nothing; the header carries the error to every rank.
            send = [empty_kjt(feats, features) for feats in self._features_per_rank]
        # Deferred: the headers (and so the batch sizes) are read when the result is waited, so
        # under TrainPipelineSparseDist the exchange travels while the previous batch computes.
        pending = kjt_all_to_all(self.env, send, error=error, capacity=self._capacity, defer=True)
        own_batch = features.stride()
        key_index = self._key_index
        return pending.then(
            lambda kjt: DistInput(
                features=kjt,
                key_index=key_index,
                batch_size_per_rank=self._batch_sizes(pending.layout, own_batch),
            )
        )

    def _batch_sizes(self, layout: KJTAllToAllLayout, own_batch: int) -> tuple[int, ...]:
        """Each rank's batch size, from the exchange's layout."""
        if layout.keys:
            return tuple(layout.recv_stride_per_key_per_rank[0])
        # No key arrives here: only this rank's own batch size matters (dim 0 elsewhere).
        sizes = [0] * self.env.world_size
        sizes[self.env.rank] = own_batch
        return tuple(sizes)

    def compute(self, dist_input: DistInput) -> Tensor:
        return pooled_lookup(self.lookup, dist_input)

    def output_dist(self, local: Tensor, dist_input: DistInput) -> Awaitable[Tensor]:
        return pooled_all_to_all_flat(
            self.env,
            local,
            dist_input.batch_size_per_rank,
            self.dim_per_rank,
            codecs=self.qcomm_codecs,
        )
