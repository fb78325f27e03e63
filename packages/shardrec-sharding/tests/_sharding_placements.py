"""The placement each test gives table `index` for a sharding type, on `world` ranks.

Shared by test_forward and test_training: column blocks cycle through the ranks (world 1
puts two blocks on one rank); on world 4 the host-local types alternate between the two hosts.
"""

from __future__ import annotations

from shardrec_planner import (
    ParameterShardingGenerator,
    column_wise,
    data_parallel,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)


def generator_for(
    kind: str, index: int, world: int, kernel: str | None = None
) -> ParameterShardingGenerator:
    local = 2 if world == 4 else world
    host = index % 2 if world == 4 else 0
    if kind == "data_parallel":
        return data_parallel()
    if kind == "table_wise":
        return table_wise(rank=(index + 1) % world, compute_kernel=kernel)
    if kind == "column_wise":
        return column_wise(ranks=[(index + k) % world for k in range(2)], compute_kernel=kernel)
    if kind == "table_column_wise":
        ranks = [host * local + k % local for k in range(2)]
        return table_column_wise(ranks=ranks, compute_kernel=kernel)
    if kind == "row_wise":
        return row_wise(compute_kernel=kernel)
    assert kind == "table_row_wise"
    return table_row_wise(host_index=host, compute_kernel=kernel)
