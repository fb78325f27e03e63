"""Where the multi-rank tests place table `index` for a manual sharding type, on `world` ranks.

One convention for the sharding and DMP tests: whole tables (table_wise) move one rank on per
table, column blocks cycle through the ranks (world 1 puts two blocks on one rank), and on
world 4 (two hosts of two ranks) the host-local types alternate between the two hosts.

This package sits below the planner, so the placement is returned as the keyword arguments of
the `shardrec_planner` generator named `kind`; a test builds the generator with
`getattr(shardrec_planner, kind)(**placement_kwargs(kind, index, world))`.
"""

from __future__ import annotations

__all__ = ["local_world_size", "placement_kwargs"]


def local_world_size(world: int) -> int:
    """Ranks per host in these tests: two hosts of two ranks on world 4, else one host."""
    return 2 if world == 4 else world


def placement_kwargs(kind: str, index: int, world: int) -> dict[str, object]:
    """The generator's keyword arguments that place table `index` of a test on `world` ranks."""
    local = local_world_size(world)
    host = index % (world // local)
    by_kind: dict[str, dict[str, object]] = {
        "data_parallel": {},
        "table_wise": {"rank": (index + 1) % world},
        "column_wise": {"ranks": [(index + k) % world for k in range(2)]},
        "table_column_wise": {"ranks": [host * local + k % local for k in range(2)]},
        "row_wise": {},
        "table_row_wise": {"host_index": host},
    }
    if kind not in by_kind:
        raise ValueError(f"sharding type {kind!r} is not one of the manual kinds {list(by_kind)}")
    return by_kind[kind]
