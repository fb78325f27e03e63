"""The planner's error when some tables cannot be placed: what each needs and what to change."""

from __future__ import annotations

import math

from shardrec_planner.errors import PlannerError, PlannerErrorType
from shardrec_planner.options import Option
from shardrec_planner.report import format_bytes
from shardrec_planner.sharder import TableInfo
from shardrec_planner.topology import Topology


def unplaceable_error(
    tables: list[TableInfo],
    options: list[list[Option]],
    bad: list[TableInfo],
    cap: float,
    topology: Topology,
    reserve: str,
    knob: str,
) -> PlannerError:
    """The PlannerError naming the `bad` tables, their smallest option and a fix for each.

    `cap` is each rank's bytes for tables, `reserve` says what was held back of the device
    memory and `knob` what to lower to hold back less.
    """
    world = topology.world_size
    index = {id(t): i for i, t in enumerate(tables)}
    need_total = sum(min(o.total_memory for o in opts) for opts in options)
    lines = []
    disk_full = False
    for table in bad[:10]:
        opts = options[index[id(table)]]
        best = min(opts, key=lambda o: o.max_memory)
        types = sorted({o.sharding_type.value for o in opts})
        hint = []
        tiered = [o for o in opts if o.tier is not None]
        if tiered:
            small = min(tiered, key=lambda o: o.max_disk)
            if small.max_disk > topology.disk_cap:
                disk_full = True
                lines.append(
                    f"  {table.name!r} ({table.rows:,} x {table.dim}): even tiered on disk, its "
                    f"store needs {format_bytes(small.max_disk)} on one rank, more than the "
                    f"{format_bytes(topology.disk_cap)} of disk per rank (Topology ssd_cap); to "
                    "fix: more disk or ranks, or a smaller table"
                )
                continue
            disk_full = True
            lines.append(
                f"  {table.name!r} ({table.rows:,} x {table.dim}): tiered on disk, its store "
                f"needs {format_bytes(small.max_disk)} on one rank and its smallest cache "
                f"{format_bytes(min(o.max_memory for o in tiered))} of memory; no rank had both "
                f"left beside the other tables (disk per rank: {format_bytes(topology.disk_cap)}, "
                "Topology ssd_cap); to fix: more disk or ranks"
            )
            continue
        elif topology.compute_device == "cpu" and "table_wise" in types:
            hint.append(
                "allow the disk tier (EmbeddingShardingPlanner(auto_tier=True), or "
                "compute_kernels=['fused', 'key_value'])"
            )
        if "row_wise" not in types:
            hint.append("allow row_wise")
        elif best.max_memory > cap:
            hint.append(f"use at least {math.ceil(world * best.max_memory / cap)} ranks")
        hint.append(f"a smaller embedding_dim than {table.dim}")
        lines.append(
            f"  {table.name!r} ({table.rows:,} x {table.dim}): its smallest option "
            f"{best.label} needs {format_bytes(best.max_memory)} on one rank; "
            f"allowed types {types}; to fix: {', or '.join(hint)}"
        )
    if len(bad) > 10:
        lines.append(f"  ... and {len(bad) - 10} more")
    names = [t.name for t in bad[:20]] + (["..."] if len(bad) > 20 else [])
    return PlannerError(
        f"cannot place {len(bad)} table(s) {names}: each rank has "
        f"{format_bytes(cap)} for tables ({format_bytes(topology.device_memory)} "
        f"{reserve}); the model needs at least "
        f"{format_bytes(need_total)} of the {format_bytes(cap * world)} on {world} rank(s).\n"
        + "\n".join(lines)
        + f"\nOr add ranks, give devices more memory (Topology hbm_cap/ddr_cap), or lower "
        f"{knob}.",
        # TorchRec's classification: the model exceeds the cluster, or the allowed options
        # (constraints, sharder) are what keep it from fitting.
        error_type=PlannerErrorType.INSUFFICIENT_STORAGE
        if need_total > cap * world or disk_full
        else PlannerErrorType.STRICT_CONSTRAINTS,
    )
