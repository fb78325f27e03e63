"""`column_wise` sharding: Column blocks on any ranks; every block sees all ids of its features,
pooled column blocks come back by all-to-all and are put side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_collectives import ShardingEnv
from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_sharding.strategies._placed import PlacedSharding
from shardrec_sharding.strategies._sequence import PlacedSequence
from shardrec_sharding.types import TableMaker

SHARDING_TYPE = ShardingType.COLUMN_WISE


def build(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> PlacedSharding:
    """The column_wise strategy for `tables` on this rank of `env`."""
    return PlacedSharding(SHARDING_TYPE, tables, env, make_table)


def build_sequence(
    tables: Sequence[TableSharding], env: ShardingEnv, make_table: TableMaker
) -> PlacedSequence:
    """The column_wise strategy for the `tables` of an EmbeddingCollection."""
    return PlacedSequence(SHARDING_TYPE, tables, env, make_table)
