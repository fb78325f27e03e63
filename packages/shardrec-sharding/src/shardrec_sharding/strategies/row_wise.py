"""`row_wise` sharding: Row blocks of ceil(rows / world) on every rank; ids bucketized by row
block, partial sums reduce-scattered.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_collectives import ShardingEnv
from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.strategies._row_blocks import RowBlockSharding
from shardrec_sharding.strategies._sequence import RowSequence
from shardrec_sharding.types import TableMaker

SHARDING_TYPE = ShardingType.ROW_WISE


def build(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> RowBlockSharding:
    """The row_wise strategy for `tables` on this rank of `env`."""
    return RowBlockSharding(SHARDING_TYPE, tables, env, make_table)


def build_sequence(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> RowSequence:
    """The row_wise strategy for the `tables` of an EmbeddingCollection."""
    return RowSequence(SHARDING_TYPE, tables, env, make_table)
