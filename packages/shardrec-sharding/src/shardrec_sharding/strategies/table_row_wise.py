"""`table_row_wise` sharding: Row blocks on the ranks of one host; ids bucketized to those ranks,
partial sums reduce-scattered (ranks of other hosts contribute zeros).
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_collectives import ShardingEnv
from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.strategies._row_blocks import RowBlockSharding
from shardrec_sharding.strategies._sequence import RowSequence
from shardrec_sharding.types import TableMaker

SHARDING_TYPE = ShardingType.TABLE_ROW_WISE


def build(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> RowBlockSharding:
    """The table_row_wise strategy for `tables` on this rank of `env`."""
    return RowBlockSharding(SHARDING_TYPE, tables, env, make_table)


def build_sequence(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> RowSequence:
    """The table_row_wise strategy for the `tables` of an EmbeddingCollection."""
    return RowSequence(SHARDING_TYPE, tables, env, make_table)
