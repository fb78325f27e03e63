"""`table_column_wise` sharding: Column blocks on the ranks of one host; communication as
column_wise (the planner keeps the blocks on one host, where the all-to-all is fast).
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_collectives import ShardingEnv
from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.strategies._placed import PlacedSharding
from shardrec_sharding.strategies._sequence import PlacedSequence
from shardrec_sharding.types import TableMaker

SHARDING_TYPE = ShardingType.TABLE_COLUMN_WISE


def build(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> PlacedSharding:
    """The table_column_wise strategy for `tables` on this rank of `env`."""
    return PlacedSharding(SHARDING_TYPE, tables, env, make_table)


def build_sequence(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> PlacedSequence:
    """The table_column_wise strategy for the `tables` of an EmbeddingCollection."""
    return PlacedSequence(SHARDING_TYPE, tables, env, make_table)
