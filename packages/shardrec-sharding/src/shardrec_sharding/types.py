"""The contract between a sharded collection and its sharding strategies.

A strategy owns the tables of one sharding type and runs the three phases for them:

```
input_dist(batch)     -> Awaitable[DistInput]   ids to the ranks that hold their rows
compute(dist_input)   -> Tensor                 local lookup, (sum_s B_s or B, D_local)
output_dist(local, dist_input) -> Awaitable[Tensor]   output_blocks' (B, w) blocks, flat
```

`output_dist`'s tensor, flattened, holds one `(B, w)` row-major block per width `w` of
`output_blocks`, one after another (a placed strategy: its all-to-all's receive buffer, one
block per source rank; the others: one `(B, output_dim)` block). The strategy's output columns
are those blocks' columns side by side. `segment_columns[i]` lists, for the collection's output
segment `i`, which of those columns hold it (in the segment's column order), so the collection
can copy every block's columns to where the unsharded module has them (`_columns`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from torch import Tensor

from shardrec_collectives import Awaitable, KJTAllToAllLayout, ShardingEnv
from shardrec_collectives.qcomm import QuantizedCommCodecs
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding.layout import LocalTable, TableSharding
from shardrec_sharding.lookup import LocalLookup, LookupTable

__all__ = [
    "DistInput",
    "LocalBatch",
    "PooledStrategy",
    "SequenceFactory",
    "SequenceInput",
    "SequenceStrategy",
    "StrategyArgs",
    "StrategyFactory",
    "TableMaker",
]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LocalBatch:
    """What every strategy's input_dist sends from: this rank's batch, checked by the collection.

    features: this rank's fixed-batch KJT. feature_pos: feature name -> its key position in
        `features` (empty when `error` is set).
    error: this rank's bad-input error, which the strategies' exchange headers carry to every
        rank (each such strategy then sends nothing); None when the input is good or the error
        was already agreed on.
    """

    features: KeyedJaggedTensor
    feature_pos: Mapping[str, int]
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class DistInput:
    """What one strategy looks up on this rank after input distribution.

    features: the KJT this rank looks up; key_index: per lookup segment, its key in features.
    batch_size_per_rank: `[B_s]` samples of each rank in `features` (rank-major rows).
    lengths: `(S, B)` this rank's own bag sizes per segment, kept when a MEAN must be divided
        after the output distribution (row-wise); else None.
    """

    features: KeyedJaggedTensor
    key_index: tuple[int, ...]
    batch_size_per_rank: tuple[int, ...]
    lengths: Tensor | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class SequenceInput:
    """What a sequence strategy looks up here, and what it needs to route the rows back.

    features: the KJT looked up here; key_index: per lookup segment, its key in it.
    layout: the all-to-all's layout (None without communication).
    counts: per output segment, the number of ids of this rank's batch.
    order: row-block engines: the permutation from id order to sent order.
    """

    features: KeyedJaggedTensor
    key_index: tuple[int, ...]
    layout: KJTAllToAllLayout | None
    counts: tuple[int, ...]
    order: Tensor | None = None


TableMaker = Callable[[TableSharding, LocalTable], LookupTable]
"""Builds the lookup table of a local table (its initial weight and optimizer)."""


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class StrategyArgs:
    """What every strategy engine is built from: its sharding type, the tables of that type
    (every rank passes the same), the ranks, and how to build a lookup table of a local table."""

    sharding_type: ShardingType
    tables: Sequence[TableSharding]
    env: ShardingEnv
    make_table: TableMaker
    qcomm_codecs: QuantizedCommCodecs | None = None
    """The codecs of the strategy's output dist (`shardrec_collectives.qcomm`: the registry's
    entry for its pooled all-to-all, reduce-scatter or sequence all-to-all); None: exact."""


class PooledStrategy(Protocol):
    """One sharding type's tables of a sharded EmbeddingBagCollection (module docstring)."""

    sharding_type: ShardingType
    lookup: LocalLookup
    output_dim: int
    output_blocks: Sequence[int]
    """Widths of the `(B, w)` blocks `output_dist` returns, in order (sum: `output_dim`)."""
    segment_columns: Mapping[int, Sequence[int]]
    carries_errors: bool
    """Whether input_dist exchanges an error flag (kjt_all_to_all's header) on every rank."""

    def input_dist(self, batch: LocalBatch) -> Awaitable[DistInput]: ...

    def compute(self, dist_input: DistInput) -> Tensor: ...

    def output_dist(self, local: Tensor, dist_input: DistInput) -> Awaitable[Tensor]: ...


StrategyFactory = Callable[
    [Sequence[TableSharding], ShardingEnv, TableMaker, QuantizedCommCodecs | None], PooledStrategy
]


class SequenceStrategy(Protocol):
    """One sharding type's tables of a sharded EmbeddingCollection: `compute` returns one row
    per received id `(N_recv, D)`; `output_dist` the rows of this rank's ids per output
    segment index, `(ids of the segment's feature, dim)`."""

    sharding_type: ShardingType
    lookup: LocalLookup
    carries_errors: bool

    def input_dist(self, batch: LocalBatch) -> Awaitable[SequenceInput]: ...

    def compute(self, dist_input: SequenceInput) -> Tensor: ...

    def output_dist(
        self, local: Tensor, dist_input: SequenceInput
    ) -> Awaitable[dict[int, Tensor]]: ...


SequenceFactory = Callable[
    [Sequence[TableSharding], ShardingEnv, TableMaker, QuantizedCommCodecs | None],
    SequenceStrategy,
]
