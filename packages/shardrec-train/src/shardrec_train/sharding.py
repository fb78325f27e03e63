"""Forcing one sharding type on every table (`--sharding-type`), and when the world is too big.

A forced type must give every rank something to hold, or the extra ranks would sit in every
collective with nothing to do; `forced_type_problem` says why a world size does not fit before
any process starts, and `forced_generators` builds the per-table plan inside the job:

| type | table i goes to | needs |
|---|---|---|
| data_parallel | every rank | nothing |
| table_wise | rank i % world | world <= number of tables |
| row_wise | row blocks of ceil(rows / world) on every rank | every block non-empty |
| table_row_wise | row blocks on the ranks of host i % hosts | every block non-empty |
| column_wise | dim / world columns on every rank | world divides the dim |
| table_column_wise | dim / local columns on the ranks of host i % hosts | local divides the dim |
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_planner import (
    ParameterShardingGenerator,
    ShardingType,
    column_wise,
    data_parallel,
    row_block_sizes,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)


def forced_type_problem(
    sharding_type: ShardingType,
    tables: Sequence[tuple[str, int]],
    embedding_dim: int,
    world_size: int,
    local_world_size: int,
) -> str | None:
    """Why `sharding_type` cannot spread `tables` (name, rows) over the world, or None."""
    st = sharding_type
    # the ranks one table's row or column blocks spread over: one host's for the table_* types
    host_local = st in (ShardingType.TABLE_ROW_WISE, ShardingType.TABLE_COLUMN_WISE)
    blocks = local_world_size if host_local else world_size
    if st is ShardingType.TABLE_WISE and world_size > len(tables):
        return (
            f"--sharding-type table_wise places one whole table per rank: world size "
            f"{world_size} is larger than the {len(tables)} tables allow; use at most "
            f"{len(tables)} ranks or let the planner decide"
        )
    if st in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE):
        for name, rows in tables:
            if 0 in row_block_sizes(rows, blocks):
                return (
                    f"--sharding-type {st.value} splits table {name!r} ({rows} rows) into "
                    f"{blocks} row blocks of ceil({rows} / {blocks}), which leaves a rank "
                    f"without rows: world size {world_size} is larger than this table allows"
                )
    columns = st in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)
    if columns and embedding_dim % blocks != 0:
        return (
            f"--sharding-type {st.value} splits each table's {embedding_dim} columns "
            f"evenly over {blocks} ranks: {blocks} does not divide --embedding-dim "
            f"{embedding_dim}; pick a dim that is a multiple of {blocks}"
        )
    return None


def forced_generators(
    sharding_type: ShardingType,
    table_names: Sequence[str],
    world_size: int,
    local_world_size: int,
) -> dict[str, ParameterShardingGenerator]:
    """Table name -> generator for `construct_module_sharding_plan`, per the module table."""
    st = sharding_type
    hosts = world_size // local_world_size
    out: dict[str, ParameterShardingGenerator] = {}
    for i, name in enumerate(table_names):
        host_ranks = [(i % hosts) * local_world_size + r for r in range(local_world_size)]
        if st is ShardingType.DATA_PARALLEL:
            out[name] = data_parallel()
        elif st is ShardingType.TABLE_WISE:
            out[name] = table_wise(rank=i % world_size)
        elif st is ShardingType.ROW_WISE:
            out[name] = row_wise()
        elif st is ShardingType.TABLE_ROW_WISE:
            out[name] = table_row_wise(host_index=i % hosts)
        elif st is ShardingType.COLUMN_WISE:
            out[name] = column_wise(ranks=list(range(world_size)))
        elif st is ShardingType.TABLE_COLUMN_WISE:
            out[name] = table_column_wise(ranks=host_ranks)
        else:
            raise ValueError(f"sharding type {st.value!r} cannot be forced for every table")
    return out
