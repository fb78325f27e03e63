"""A hand-written (or another planner's) plan entry as one of our options, for
`EmbeddingShardingPlanner.estimate`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.enums import ShardingType
from shardrec_planner.estimator import Workload
from shardrec_planner.geometry import ShardArrays
from shardrec_planner.kernel_choice import cache_ratio_of
from shardrec_planner.options import Option, estimated_option
from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.search import SearchResult
from shardrec_planner.sharder import TableInfo
from shardrec_planner.sharding_plan import ShardingPlan
from shardrec_planner.topology import Topology

__all__ = ["given_option", "given_result"]


def given_option(
    table: TableInfo,
    ps: ParameterSharding,
    *,
    topology: Topology,
    constraints: ParameterConstraints | None,
    batch_size: int,
    optimizer: tuple[float, float],
) -> Option:
    """The option of a given plan's entry `ps` for `table`, with our cost model's estimates (as
    in planning: a tiered entry priced with its cache size and statistics)."""
    if ps.sharding_type is ShardingType.DATA_PARALLEL:
        n = len(ps.ranks)
        zeros = np.zeros(n, dtype=np.int64)
        shards = ShardArrays(
            np.full(n, table.rows, dtype=np.int64),
            np.full(n, table.dim, dtype=np.int64),
            zeros,
            zeros,
        )
    else:
        shards = ShardArrays(
            *(np.array([s.shard_sizes[i] for s in ps.shards], dtype=np.int64) for i in (0, 1)),
            *(np.array([s.shard_offsets[i] for s in ps.shards], dtype=np.int64) for i in (0, 1)),
        )
    return estimated_option(
        table,
        Workload.of(table, constraints, batch_size),
        topology,
        optimizer,
        cache_ratio_of(ps),
        sharding_type=ps.sharding_type,
        kernel=ps.compute_kernel,
        shards=shards,
        block=1,
        tier_load_factor=cache_ratio_of(ps),
        cache_stats=None if ps.cache_params is None else ps.cache_params.stats,
    )


def given_result(
    tables: list[TableInfo],
    plan: ShardingPlan,
    *,
    topology: Topology,
    constraints: Mapping[str, ParameterConstraints],
    batch_size: int,
    optimizers: Mapping[str, tuple[float, float]],
    lower_bound_s: float,
) -> tuple[list[list[Option]], SearchResult]:
    """Each table's option under `plan` (one per table) and the plan as a search result placed
    on the plan's ranks (reasons "given plan"); a table the plan lacks, or ranks that do not
    fit its shards, is a ValueError naming the table."""
    world = topology.world_size
    loads, memory, host_memory, disk = (np.zeros(world) for _ in range(4))
    ranks: list[npt.NDArray[np.int64]] = []
    given: list[list[Option]] = []
    for table in tables:
        ps = (plan.get_plan_for_module(table.module_path) or {}).get(table.name)
        if ps is None:
            raise ValueError(
                f"plan has no entry for table {table.name!r} of module {table.module_path!r}"
            )
        opt = given_option(
            table,
            ps,
            topology=topology,
            constraints=constraints.get(table.name),
            batch_size=batch_size,
            optimizer=optimizers.get(table.module_path, (0.0, 0.0)),
        )
        r = np.array(ps.ranks, dtype=np.int64)
        if len(r) != len(opt.cost) or (len(r) and r.max() >= world):
            raise ValueError(
                f"table {table.name!r}: plan ranks {list(ps.ranks)} do not fit "
                f"{len(opt.cost)} shard(s) on world size {world}"
            )
        np.add.at(loads, r, opt.cost)
        np.add.at(memory, r, opt.memory)
        np.add.at(host_memory, r, opt.host_memory)
        np.add.at(disk, r, opt.disk_bytes)
        given.append([opt])
        ranks.append(r)
    result = SearchResult(
        choice=[0] * len(tables),
        ranks=ranks,
        reasons=["given plan"] * len(tables),
        loads=loads,
        memory=memory,
        host_memory=host_memory,
        lower_bound=lower_bound_s,
        disk=disk,
        failed=[],
    )
    return given, result
