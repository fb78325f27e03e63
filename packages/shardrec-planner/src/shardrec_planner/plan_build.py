"""From the search's choices to a `ShardingPlan`: each table's `ParameterSharding` and the
plan's stats (per-table decisions with their reasons and tier figures, per-rank load)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shardrec_planner.cache_params import KeyValueParams
from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.enums import ShardingType
from shardrec_planner.kernel_choice import kernel_options
from shardrec_planner.options import Option
from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.search import SearchResult
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata, placement
from shardrec_planner.sharder import TableInfo
from shardrec_planner.sharding_plan import ShardingPlan
from shardrec_planner.stats import PlanStats, RankStats, TableDecision
from shardrec_planner.tier_plan import tier_cache_params, tier_decision
from shardrec_planner.topology import Topology

__all__ = ["build_plan"]


def build_plan(
    tables: list[TableInfo],
    options: list[list[Option]],
    result: SearchResult,
    seconds: float,
    *,
    topology: Topology,
    constraints: Mapping[str, ParameterConstraints],
    tier_store_dir: str | None,
    memory_cap: float,
    batch_size: int,
) -> ShardingPlan:
    """The plan of the chosen options and ranks (`result`), with its stats: each table's
    `ParameterSharding` (its constraints' kernel options; a tiered option's cache size and
    store directory), decisions and reasons, and each rank's load; `seconds` is the search
    time reported."""
    topo = topology
    plan: dict[str, dict[str, ParameterSharding]] = {}
    decisions: list[TableDecision] = []
    for t, table in enumerate(tables):
        opt = options[t][result.choice[t]]
        ranks = [int(r) for r in result.ranks[t]]
        extra = kernel_options(constraints.get(table.name))
        if opt.tier is not None:
            extra["cache_params"] = tier_cache_params(extra.get("cache_params"), opt.tier)
            if tier_store_dir is not None and "key_value_params" not in extra:
                extra["key_value_params"] = KeyValueParams(ssd_storage_directory=tier_store_dir)
        if opt.sharding_type is ShardingType.DATA_PARALLEL:
            ps = ParameterSharding(
                sharding_type=opt.sharding_type, compute_kernel=opt.kernel, ranks=ranks, **extra
            )
        else:
            metas = tuple(
                ShardMetadata(
                    shard_offsets=offsets,
                    shard_sizes=sizes,
                    placement=placement(topo.compute_device, r, topo.local_size),
                )
                for (sizes, offsets), r in zip(opt.shards.to_list(), ranks, strict=True)
            )
            ps = ParameterSharding(
                sharding_type=opt.sharding_type,
                compute_kernel=opt.kernel,
                ranks=ranks,
                sharding_spec=EnumerableShardingSpec(shards=metas),
                **extra,
            )
        plan.setdefault(table.module_path, {})[table.name] = ps
        decisions.append(
            TableDecision(
                module_path=table.module_path,
                table=table.name,
                sharding_type=opt.sharding_type.value,
                compute_kernel=opt.kernel.value,
                ranks=tuple(ranks),
                memory_bytes=int(opt.memory.sum()),
                cost_s=opt.total_cost,
                max_shard_cost_s=opt.max_cost,
                tier=None if opt.tier is None else tier_decision(opt, ranks),
                reason=result.reasons[t]
                + (
                    f"; dynamic (raw-id): +{table.dynamic_bytes_per_row:.0f} B/slot id map "
                    "and metadata in host memory, one map probe per id"
                    if table.dynamic_bytes_per_row
                    else ""
                ),
            )
        )
    loads = result.loads if len(tables) else np.zeros(topo.world_size)
    mean = float(loads.mean())
    top = float(loads.max())
    stats = PlanStats(
        ranks=tuple(
            RankStats(
                rank=r,
                memory_bytes=int(max(result.memory[r], 0.0)) if len(tables) else 0,
                memory_cap_bytes=int(memory_cap),
                host_memory_bytes=int(max(result.host_memory[r], 0.0)) if len(tables) else 0,
                disk_bytes=int(max(result.disk[r], 0.0)) if len(tables) else 0,
                cost_s=float(loads[r]),
            )
            for r in range(topo.world_size)
        ),
        tables=tuple(decisions),
        max_cost_s=top,
        lower_bound_s=result.lower_bound,
        imbalance=top / mean if mean > 0 else 1.0,
        batch_size=batch_size,
        compute_device=topo.compute_device,
        search_seconds=seconds,
        memory_source=topo.memory_text(),
    )
    return ShardingPlan(plan=plan, stats=stats)
