"""What a sharded collection knows about its tables: output segments, shards, local pieces.

A *segment* is one (table, feature) pair, i.e. one output block of the collection, in the
unsharded module's order (tables in order, then each table's features). A *shard* is one
rectangle of a table from the plan. A *local table* is everything one rank holds of a table:
the rows of its shard and, for column-split types, the columns of every shard placed here,
side by side (two column blocks of one table on one rank become one wider local table).

```
table t (rows x dim), column_wise over ranks [0, 1, 0]:
   cols [0, 4) -> rank 0   cols [4, 8) -> rank 1   cols [8, 12) -> rank 0
rank 0's local table t: (rows, 8) = columns [0, 4) ++ [8, 12)
```

`check_plan` rejects a plan that does not match the module before anything is communicated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch

from shardrec_embedding import BaseEmbeddingConfig, EmbeddingBagConfig, PoolingType
from shardrec_planner import EmbeddingComputeKernel, ParameterSharding, ShardingType
from shardrec_planner.kernel_choice import runs_virtual_tiered

__all__ = [
    "LocalTable",
    "Segment",
    "Shard",
    "TableSharding",
    "check_plan",
    "segments_of",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Segment:
    """One (table, feature) output block, `index` in the unsharded module's output order."""

    index: int
    table: str
    feature: str
    name: str
    dim: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shard:
    """Rows `[row_offset, row_offset + rows)` x columns `[col_offset, col_offset + cols)`."""

    rank: int
    row_offset: int
    rows: int
    col_offset: int
    cols: int


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LocalTable:
    """What this rank holds of one table (see module docstring).

    column_blocks: `(col_offset, cols)` of each column block held, in local column order.
    """

    name: str
    row_offset: int
    rows: int
    column_blocks: tuple[tuple[int, int], ...]
    pooling: PoolingType

    @property
    def dim(self) -> int:
        return sum(c for _, c in self.column_blocks)

    def slice_of(self, full: torch.Tensor) -> torch.Tensor:
        """This local table's `(rows, dim)` part of a full `(num_embeddings, embedding_dim)`."""
        rows = full[self.row_offset : self.row_offset + self.rows]
        blocks = [rows[:, c : c + n] for c, n in self.column_blocks]
        return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class TableSharding:
    """One table of the module with its plan entry, parsed.

    `fused` says whether lookups of this table apply the optimizer in backward (plan kernel
    fused*) or produce dense gradients (kernel dense; always so for data_parallel).
    """

    config: BaseEmbeddingConfig
    sharding: ParameterSharding
    shards: tuple[Shard, ...]
    segments: tuple[Segment, ...]

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def sharding_type(self) -> ShardingType:
        return self.sharding.sharding_type

    @property
    def pooling(self) -> PoolingType:
        config = self.config
        return config.pooling if isinstance(config, EmbeddingBagConfig) else PoolingType.NONE

    @property
    def fused(self) -> bool:
        return self.sharding.compute_kernel is not EmbeddingComputeKernel.DENSE

    def local(self, rank: int, pooling: PoolingType | None = None) -> LocalTable | None:
        """What `rank` holds of this table (None: nothing, or only empty shards)."""
        mine = [s for s in self.shards if s.rank == rank and s.rows > 0 and s.cols > 0]
        if not mine:
            return None
        row_ranges = {(s.row_offset, s.rows) for s in mine}
        # Row-split types place one row block per rank; column-split types keep every row.
        assert len(row_ranges) == 1, f"table {self.name}: several row blocks on rank {rank}"
        row_offset, rows = row_ranges.pop()
        return LocalTable(
            name=self.name,
            row_offset=row_offset,
            rows=rows,
            column_blocks=tuple((s.col_offset, s.cols) for s in mine),
            pooling=self.pooling if pooling is None else pooling,
        )


def segments_of(configs: Sequence[BaseEmbeddingConfig]) -> list[Segment]:
    """The output segments of a collection, named as the unsharded module names its keys
    (`feature`, or `feature@table` when several tables read the feature)."""
    count: dict[str, int] = {}
    for t in configs:
        for f in t.feature_names:
            count[f] = count.get(f, 0) + 1
    out: list[Segment] = []
    for t in configs:
        for f in t.feature_names:
            name = f if count[f] == 1 else f"{f}@{t.name}"
            out.append(
                Segment(index=len(out), table=t.name, feature=f, name=name, dim=t.embedding_dim)
            )
    return out


_ROW_SPLIT = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
_COLUMN_SPLIT = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


def check_plan(
    configs: Sequence[BaseEmbeddingConfig],
    plan: Mapping[str, ParameterSharding],
    world_size: int,
    supported: Sequence[ShardingType],
) -> list[TableSharding]:
    """Parse and check one module's plan against its tables; `ValueError` naming the table.

    Checks: every table planned and no unknown table; ranks inside the world; the sharding type
    supported; shards inside the table, not overlapping, covering it exactly, with the shape
    their sharding type implies (row blocks span all columns, column blocks all rows).
    """
    names = [t.name for t in configs]
    unknown = sorted(set(plan) - set(names))
    if unknown:
        raise ValueError(
            f"the plan names table(s) {unknown} that the module does not have; its tables are "
            f"{names}"
        )
    missing = [n for n in names if n not in plan]
    if missing:
        raise ValueError(
            f"the plan has no entry for table(s) {missing}; every table of the module needs one "
            f"(use data_parallel() to replicate a table)"
        )
    segments = segments_of(configs)
    out: list[TableSharding] = []
    for config in configs:
        ps = plan[config.name]
        out.append(
            TableSharding(
                config=config,
                sharding=ps,
                shards=_check_table(config, ps, world_size, supported),
                segments=tuple(s for s in segments if s.table == config.name),
            )
        )
    return out


def _check_table(
    config: BaseEmbeddingConfig,
    ps: ParameterSharding,
    world_size: int,
    supported: Sequence[ShardingType],
) -> tuple[Shard, ...]:
    name, rows, dim = config.name, config.num_embeddings, config.embedding_dim
    if config.use_virtual_table:
        # A virtual table reaches here unresolved only from a meta-device module that had no
        # capacity to run it with (shardrec_embedding.virtual).
        raise ValueError(
            f"table {name!r}: use_virtual_table=True with num_embeddings {rows} (the virtual id "
            "space) has no capacity to run with: pass dynamic=DynamicTableConfig(capacity=N) "
            "beside it (N: the ids the table keeps at once) and it runs as a raw-id table "
            "(docs/dynamic.md, TorchRec's virtual tables)"
        )
    if runs_virtual_tiered(ps) and config.dynamic is None:
        raise ValueError(
            f"table {name!r}: compute kernel {ps.compute_kernel.value!r} runs raw-id (dynamic) "
            "tables only; give the table dynamic=DynamicTableConfig(...), or plan 'key_value' "
            "for a table of dense ids on disk"
        )
    st = ps.sharding_type
    if st not in supported:
        raise ValueError(
            f"table {name!r}: sharding type {st.value!r} is not supported here; supported: "
            f"{[s.value for s in supported]}"
        )
    bad_ranks = [r for r in ps.ranks if not 0 <= r < world_size]
    if bad_ranks:
        raise ValueError(
            f"table {name!r}: ranks {bad_ranks} are outside the world of {world_size} ranks "
            f"(valid: 0..{world_size - 1})"
        )
    if st is ShardingType.DATA_PARALLEL:
        if ps.compute_kernel is not EmbeddingComputeKernel.DENSE:
            raise ValueError(
                f"table {name!r}: data_parallel tables use the 'dense' kernel (gradients are "
                f"all-reduced), got {ps.compute_kernel.value!r}"
            )
        return tuple(
            Shard(rank=r, row_offset=0, rows=rows, col_offset=0, cols=dim)
            for r in range(world_size)
        )
    shards = tuple(
        Shard(
            rank=m.rank,
            row_offset=m.shard_offsets[0],
            rows=m.shard_sizes[0],
            col_offset=m.shard_offsets[1],
            cols=m.shard_sizes[1],
        )
        for m in ps.shards
        if len(m.shard_offsets) == 2
    )
    if len(shards) != len(ps.shards):
        raise ValueError(f"table {name!r}: every shard must be 2-d (rows, columns)")
    for s in shards:
        if s.row_offset + s.rows > rows or s.col_offset + s.cols > dim:
            raise ValueError(
                f"table {name!r} ({rows} x {dim}): shard at offsets ({s.row_offset}, "
                f"{s.col_offset}) of sizes ({s.rows}, {s.cols}) lies outside the table"
            )
        if st in _ROW_SPLIT and (s.col_offset, s.cols) != (0, dim):
            raise ValueError(
                f"table {name!r}: {st.value} shards span all {dim} columns, got columns "
                f"[{s.col_offset}, {s.col_offset + s.cols})"
            )
        if st in _COLUMN_SPLIT and (s.row_offset, s.rows) != (0, rows):
            raise ValueError(
                f"table {name!r}: {st.value} shards span all {rows} rows, got rows "
                f"[{s.row_offset}, {s.row_offset + s.rows})"
            )
    if st is ShardingType.TABLE_WISE and len(shards) != 1:
        raise ValueError(f"table {name!r}: table_wise needs exactly one shard, got {len(shards)}")
    if st in _ROW_SPLIT:
        ranks = [s.rank for s in shards if s.rows > 0]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"table {name!r}: {st.value} places two row blocks on one rank")
    _check_cover(name, rows, dim, shards)
    return shards


def _check_cover(name: str, rows: int, dim: int, shards: Sequence[Shard]) -> None:
    area = sum(s.rows * s.cols for s in shards)
    boxes = [s for s in shards if s.rows and s.cols]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if (
                a.row_offset < b.row_offset + b.rows
                and b.row_offset < a.row_offset + a.rows
                and a.col_offset < b.col_offset + b.cols
                and b.col_offset < a.col_offset + a.cols
            ):
                raise ValueError(
                    f"table {name!r}: shards at ({a.row_offset}, {a.col_offset}) and "
                    f"({b.row_offset}, {b.col_offset}) overlap"
                )
    if area != rows * dim:
        raise ValueError(
            f"table {name!r}: the shard sizes cover {area} of the table's {rows} x {dim} = "
            f"{rows * dim} entries; the shards must cover the table exactly"
        )
