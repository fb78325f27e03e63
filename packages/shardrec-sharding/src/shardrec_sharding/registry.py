"""Sharding strategies by sharding type: the one place that maps a type to its code."""

from __future__ import annotations

from collections.abc import Mapping

from shardrec_planner import ShardingType
from shardrec_sharding.strategies import (
    column_wise,
    data_parallel,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_sharding.types import SequenceFactory, StrategyFactory

__all__ = ["POOLED_STRATEGIES", "SEQUENCE_STRATEGIES", "strategy_for"]

POOLED_STRATEGIES: Mapping[ShardingType, StrategyFactory] = {
    m.SHARDING_TYPE: m.build
    for m in (data_parallel, table_wise, column_wise, table_column_wise, row_wise, table_row_wise)
}
"""Sharding type -> factory of its strategy for pooled (EmbeddingBagCollection) tables.
The order is the order in which a collection runs them (the same on every rank)."""

SEQUENCE_STRATEGIES: Mapping[ShardingType, SequenceFactory] = {
    m.SHARDING_TYPE: m.build_sequence
    for m in (data_parallel, table_wise, column_wise, table_column_wise, row_wise, table_row_wise)
}
"""Sharding type -> factory of its strategy for sequence (EmbeddingCollection) tables."""


def strategy_for(sharding_type: ShardingType) -> StrategyFactory:
    """The factory for `sharding_type`; `ValueError` listing the supported ones."""
    found = POOLED_STRATEGIES.get(ShardingType(sharding_type))
    if found is None:
        valid = [t.value for t in POOLED_STRATEGIES]
        raise ValueError(f"sharding type {sharding_type!r} has no strategy; supported: {valid}")
    return found
