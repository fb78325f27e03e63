"""This rank's part of a strategy's tables: the lookup over the shards it holds, and the output
columns of segments laid side by side. Shared by the engines."""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_embedding import PoolingType
from shardrec_sharding.layout import Segment
from shardrec_sharding.lookup import LocalLookup, LookupSegment, LookupTable
from shardrec_sharding.types import StrategyArgs

__all__ = ["consecutive_columns", "held_lookup"]


def held_lookup(
    args: StrategyArgs, segments: Sequence[Segment], pooling: PoolingType | None = None
) -> tuple[LocalLookup, list[LookupTable]]:
    """A lookup over the shards this rank holds of `args.tables`, one output per segment of
    `segments` (lookup index -1 where this rank holds no shard of its table), and its tables.
    pooling: overrides the tables' pooling (SUM for partial sums that are divided later)."""
    tables: list[LookupTable] = []
    index: dict[str, int] = {}
    for t in args.tables:
        local = t.local(args.env.rank, pooling=pooling)
        if local is not None:
            index[t.name] = len(tables)
            tables.append(args.make_table(t, local))
    lookup_segments = [LookupSegment(index.get(s.table, -1), s.dim) for s in segments]
    return LocalLookup(tables, lookup_segments, args.env.device), tables


def consecutive_columns(segments: Sequence[Segment]) -> tuple[dict[int, list[int]], int]:
    """Each segment's output columns when the segments' rows are laid side by side, and the
    total width."""
    columns: dict[int, list[int]] = {}
    start = 0
    for s in segments:
        columns[s.index] = list(range(start, start + s.dim))
        start += s.dim
    return columns, start
