"""Sharding strategies by sharding type: the one place that maps a type to its code.

A strategy is a description (data): its sharding type, one line on how it communicates, and
the engine that runs it for pooled (EmbeddingBagCollection) and sequence (EmbeddingCollection)
tables. Three engines serve the six types (docs/design/sharding-strategy-engines.md): local
(`data_parallel`), placed (`_placed`, `_sequence.PlacedSequence`) and row blocks
(`_row_blocks`, `_sequence.RowSequence`); a type is one engine with its sharding type bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from shardrec_collectives import ShardingEnv
from shardrec_collectives.qcomm import CommOp, QuantizedCommCodecs
from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.strategies._placed import PlacedSharding
from shardrec_sharding.strategies._row_blocks import RowBlockSharding
from shardrec_sharding.strategies._sequence import PlacedSequence, RowSequence
from shardrec_sharding.strategies.data_parallel import DataParallelSequence, DataParallelSharding
from shardrec_sharding.types import (
    PooledStrategy,
    SequenceFactory,
    SequenceStrategy,
    StrategyArgs,
    StrategyFactory,
    TableMaker,
)

__all__ = [
    "POOLED_COMM_OPS",
    "POOLED_STRATEGIES",
    "SEQUENCE_COMM_OPS",
    "SEQUENCE_STRATEGIES",
    "STRATEGIES",
    "StrategyDescription",
    "strategy_for",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StrategyDescription:
    """One sharding type's strategy: how it communicates (`summary`) and its engines.

    pooled / sequence: the engine classes; each is built as `engine(StrategyArgs(...))`.
    pooled_comm: the collective of the pooled output dist whose `qcomm_codecs_registry` entry
    it applies (None: none communicates embeddings); the sequence output dist is always the
    sequence all-to-all (`SEQUENCE_EMBEDDINGS_ALL_TO_ALL`) where `pooled_comm` is not None.
    """

    sharding_type: ShardingType
    summary: str
    pooled: Callable[[StrategyArgs], PooledStrategy]
    sequence: Callable[[StrategyArgs], SequenceStrategy]
    pooled_comm: CommOp | None = CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL

    def build(
        self,
        tables: Sequence[TableSharding],
        env: ShardingEnv,
        make_table: TableMaker,
        qcomm_codecs: QuantizedCommCodecs | None = None,
    ) -> PooledStrategy:
        """The strategy for the pooled `tables` on this rank of `env` (`qcomm_codecs`: of its
        pooled all-to-all, where it has one)."""
        return self.pooled(self._args(tables, env, make_table, qcomm_codecs))

    def build_sequence(
        self,
        tables: Sequence[TableSharding],
        env: ShardingEnv,
        make_table: TableMaker,
        qcomm_codecs: QuantizedCommCodecs | None = None,
    ) -> SequenceStrategy:
        """The strategy for the `tables` of an EmbeddingCollection on this rank of `env`
        (`qcomm_codecs`: of its sequence all-to-all, where it has one)."""
        return self.sequence(self._args(tables, env, make_table, qcomm_codecs))

    def _args(
        self,
        tables: Sequence[TableSharding],
        env: ShardingEnv,
        make_table: TableMaker,
        qcomm_codecs: QuantizedCommCodecs | None,
    ) -> StrategyArgs:
        return StrategyArgs(
            sharding_type=self.sharding_type,
            tables=tables,
            env=env,
            make_table=make_table,
            qcomm_codecs=qcomm_codecs,
        )


STRATEGIES: tuple[StrategyDescription, ...] = (
    StrategyDescription(
        sharding_type=ShardingType.DATA_PARALLEL,
        summary="the whole table on every rank; no input or output communication, gradients "
        "all-reduced",
        pooled=DataParallelSharding,
        sequence=DataParallelSequence,
        pooled_comm=None,
    ),
    StrategyDescription(
        sharding_type=ShardingType.TABLE_WISE,
        summary="the whole table on one rank; features go to the rank that holds their table "
        "and pooled rows come back by all-to-all",
        pooled=PlacedSharding,
        sequence=PlacedSequence,
    ),
    StrategyDescription(
        sharding_type=ShardingType.COLUMN_WISE,
        summary="column blocks on any ranks; every block sees all ids of its features, pooled "
        "column blocks come back by all-to-all and are put side by side",
        pooled=PlacedSharding,
        sequence=PlacedSequence,
    ),
    StrategyDescription(
        sharding_type=ShardingType.TABLE_COLUMN_WISE,
        summary="column blocks on the ranks of one host; communication as column_wise (the "
        "planner keeps the blocks on one host, where the all-to-all is fast)",
        pooled=PlacedSharding,
        sequence=PlacedSequence,
    ),
    StrategyDescription(
        sharding_type=ShardingType.ROW_WISE,
        summary="row blocks of ceil(rows / world) on every rank; ids bucketized by row block, "
        "partial sums reduce-scattered",
        pooled=RowBlockSharding,
        sequence=RowSequence,
        pooled_comm=CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER,
    ),
    StrategyDescription(
        sharding_type=ShardingType.TABLE_ROW_WISE,
        summary="row blocks on the ranks of one host; ids bucketized to those ranks, partial "
        "sums reduce-scattered (ranks of other hosts contribute zeros)",
        pooled=RowBlockSharding,
        sequence=RowSequence,
        pooled_comm=CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER,
    ),
)
"""Every strategy, in the order a collection runs them (the same on every rank)."""

POOLED_STRATEGIES: Mapping[ShardingType, StrategyFactory] = {
    s.sharding_type: s.build for s in STRATEGIES
}
"""Sharding type -> factory of its strategy for pooled (EmbeddingBagCollection) tables."""

SEQUENCE_STRATEGIES: Mapping[ShardingType, SequenceFactory] = {
    s.sharding_type: s.build_sequence for s in STRATEGIES
}
"""Sharding type -> factory of its strategy for sequence (EmbeddingCollection) tables."""

POOLED_COMM_OPS: Mapping[ShardingType, CommOp | None] = {
    s.sharding_type: s.pooled_comm for s in STRATEGIES
}
"""Sharding type -> the collective of its pooled output dist (the registry entry it applies)."""

SEQUENCE_COMM_OPS: Mapping[ShardingType, CommOp | None] = {
    s.sharding_type: None if s.pooled_comm is None else CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL
    for s in STRATEGIES
}
"""Sharding type -> the collective of its sequence output dist (the registry entry it applies)."""


def strategy_for(sharding_type: ShardingType) -> StrategyFactory:
    """The factory for `sharding_type`; `ValueError` listing the supported ones."""
    found = POOLED_STRATEGIES.get(ShardingType(sharding_type))
    if found is None:
        valid = [t.value for t in POOLED_STRATEGIES]
        raise ValueError(f"sharding type {sharding_type!r} has no strategy; supported: {valid}")
    return found
