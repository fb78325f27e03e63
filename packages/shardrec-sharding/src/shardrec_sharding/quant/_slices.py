"""Cutting a quantized collection's tables into the shards a plan places: the plan checks and
the per-shard tables and state both sharded quantized collections build their per-device
modules from (codes and each row's scale/bias are sliced, never re-quantized)."""

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import torch

from shardrec_embedding import BaseEmbeddingConfig, DataType
from shardrec_planner import ParameterSharding, ShardingType

__all__ = ["TableShard", "check_quant_plan", "table_shards"]

_BITS = {DataType.INT8: 8, DataType.INT4: 4, DataType.INT2: 2}

_Config = TypeVar("_Config", bound=BaseEmbeddingConfig)


class _Segment(Protocol):
    """What is read of a collection's segment (one table read by one feature)."""

    @property
    def table_index(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class TableShard(Generic[_Config]):
    """Shard `index` of `table`, on `rank`: rows `[r0, r0 + rows)`, columns `[c0, c0 + cols)`.

    `config` is the shard as a table of its own (named `<table>__shard<index>`), `state` its
    sliced quantized rows under `<container>.<that name>.`, and `segments` the unsharded
    collection's segments that read `table` (each reads this shard too).
    """

    table: _Config
    index: int
    rank: int
    r0: int
    rows: int
    c0: int
    cols: int
    row_wise: bool
    segments: list[int]
    config: _Config
    state: dict[str, torch.Tensor]


def table_shards(
    configs: Sequence[_Config],
    segments: Sequence[_Segment],
    plan: Mapping[str, ParameterSharding],
    world: int,
    source: Mapping[str, torch.Tensor],
    container: str,
) -> Iterator[TableShard[_Config]]:
    """Every shard of every table (table order, then shard order) after `check_quant_plan`;
    `source` is the unsharded module's state_dict, its tables under `<container>.<name>.`."""
    check_quant_plan(configs, plan, world)
    for ti, t in enumerate(configs):
        ps = plan[t.name]
        row_wise = ps.sharding_type is ShardingType.ROW_WISE
        table_segments = [s for s, seg in enumerate(segments) if seg.table_index == ti]
        for i, (shard, rank) in enumerate(zip(ps.shards, ps.ranks, strict=True)):
            (r0, c0), (rows, cols) = shard.shard_offsets, shard.shard_sizes
            name = f"{t.name}__shard{i}"
            # a table of its own: the table's data type, features (and pooling), not its init
            config = dataclasses.replace(
                t,
                name=name,
                num_embeddings=rows,
                embedding_dim=cols,
                init_fn=None,
                num_embeddings_post_pruning=None,
            )
            state = _slice_state(
                source, f"{container}.{t.name}.", f"{container}.{name}.", t, r0, rows, c0, cols
            )
            yield TableShard(
                t, i, rank, r0, rows, c0, cols, row_wise, table_segments, config, state
            )


_SUPPORTED = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE)


def check_quant_plan(
    configs: Sequence[BaseEmbeddingConfig], plan: Mapping[str, ParameterSharding], world: int
) -> None:
    """`ValueError` naming the table for a plan the quantized sharded collections cannot run:
    a table without an entry, a sharding type other than table/row/column_wise, a shard off
    the devices or outside the table, or shards that do not tile it."""
    missing = [t.name for t in configs if t.name not in plan]
    if missing:
        raise ValueError(f"the plan has no entry for table(s) {missing}")
    for t in configs:
        ps = plan[t.name]
        if ps.sharding_type not in _SUPPORTED:
            raise ValueError(
                f"table {t.name!r}: sharding type {ps.sharding_type.value} is not supported for "
                "quantized inference; use table_wise, row_wise or column_wise"
            )
        _check_geometry(t, ps, world)


def _check_geometry(table: BaseEmbeddingConfig, ps: ParameterSharding, world: int) -> None:
    """`ValueError` naming the table for a shard off the devices or outside the table, or
    shards that do not cover it."""
    area = 0
    for i, (shard, rank) in enumerate(zip(ps.shards, ps.ranks, strict=True)):
        if not 0 <= rank < world:
            raise ValueError(
                f"table {table.name!r}: shard {i} is placed on rank {rank}, outside "
                f"world_size {world}"
            )
        (r0, c0), (rows, cols) = shard.shard_offsets, shard.shard_sizes
        if r0 + rows > table.num_embeddings or c0 + cols > table.embedding_dim:
            raise ValueError(
                f"table {table.name!r}: shard {i} (rows [{r0}, {r0 + rows}), columns "
                f"[{c0}, {c0 + cols})) lies outside the table's "
                f"({table.num_embeddings}, {table.embedding_dim})"
            )
        area += rows * cols
    if area != table.num_embeddings * table.embedding_dim:
        raise ValueError(
            f"table {table.name!r}: the shards cover {area} of the table's "
            f"{table.num_embeddings} x {table.embedding_dim} elements; they must tile it"
        )


def _slice_state(
    source: Mapping[str, torch.Tensor],
    prefix: str,
    new_prefix: str,
    table: BaseEmbeddingConfig,
    r0: int,
    rows: int,
    c0: int,
    cols: int,
) -> dict[str, torch.Tensor]:
    weight = source[prefix + "weight"][r0 : r0 + rows]
    bits = _BITS.get(table.data_type)
    if bits is None:
        weight = weight[:, c0 : c0 + cols]
    else:
        end = c0 + cols
        if (c0 * bits) % 8 or ((end * bits) % 8 and end != table.embedding_dim):
            raise ValueError(
                f"table {table.name!r}: column block [{c0}, {end}) does not start and end on a "
                f"byte of {table.data_type.value} codes; use column blocks that are multiples "
                f"of {8 // bits}"
            )
        weight = weight[:, c0 * bits // 8 : -(-end * bits // 8)]
    out = {new_prefix + "weight": weight.contiguous()}
    if prefix + "weight_qscaleshift" in source:
        qss = source[prefix + "weight_qscaleshift"][r0 : r0 + rows]
        out[new_prefix + "weight_qscaleshift"] = qss.contiguous()
    return out
