"""TorchRec's planner stats (`EmbeddingStats`, `NoopEmbeddingStats`): the printed plan summary.

The planner calls `log(...)` of each of its stats objects with the finished plan (TorchRec's
`Stats.log` arguments). `EmbeddingStats` builds a boxed text table (`_stats_table`, a list of
lines, the first a row of `#`) and writes it to this module's logger at INFO:

- how many proposals were evaluated, how many could be placed, how long planning took;
- per rank: estimated device memory (HBM on accelerators, DDR on cpu), host memory (DDR) and
  step time, and the tables placed there;
- the largest per-rank HBM estimate ("Top HBM Memory Usage Estimation: <GB> GB"), and the
  largest and smallest with the ranks within 1 MB of each ("Max HBM: <GB> GB on ranks [..]",
  "Min HBM: ...", TorchRec's rule);
- per compute kernel, the placed options' summed storage estimates, one line each under
  "Compute Kernels Total Estimated Memory" ("<kernel>: HBM: <GB> GB, DDR: <GB> GB, SSD: <GB> GB");
- how many tables had their compute kernel fixed by a constraint ("Hardcoded") and how many
  were left to the planner ("Auto-selected").

The per-rank numbers come from the plan's own stats (our planner's estimates) when it has them,
else from the placed sharding options' shard estimates (TorchRec's loop).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.planner_types import ShardingOption, Storage
from shardrec_planner.topology import Topology

logger = logging.getLogger(__name__)

_WIDTH = 100
_GB = 1024**3


def _row(text: str) -> str:
    return f"# {text: <{_WIDTH - 3}}#"


def _per_rank_from_plan(plan: Any, world: int) -> list[tuple[float, float, float]] | None:
    stats = getattr(plan, "stats", None)
    if stats is None or len(stats.ranks) != world:
        return None
    accel = stats.compute_device != "cpu"
    return [
        (
            float(r.memory_bytes) if accel else 0.0,
            float(r.host_memory_bytes) + (0.0 if accel else float(r.memory_bytes)),
            1000.0 * r.cost_s,
        )
        for r in stats.ranks
    ]


def _per_rank_from_options(
    best_plan: Sequence[ShardingOption], world: int
) -> list[tuple[float, float, float]]:
    totals = [[0.0, 0.0, 0.0] for _ in range(world)]
    for option in best_plan:
        for shard in option.shards:
            if shard.rank is None or not 0 <= shard.rank < world:
                continue
            if shard.storage is not None:
                totals[shard.rank][0] += shard.storage.hbm
                totals[shard.rank][1] += shard.storage.ddr
            if shard.perf is not None:
                totals[shard.rank][2] += shard.perf.total
    return [(h, d, p) for h, d, p in totals]


def _gb(n: float) -> float:
    return round(n / _GB, 3)


def _rank_hbm_text(label: str, per_rank_hbm: Sequence[float]) -> str:
    """`<label> HBM: <GB> GB on ranks [..]`: the max or min per-rank HBM and the ranks within
    1 MB of it (TorchRec's rule)."""
    value = (max if label == "Max" else min)(per_rank_hbm, default=0.0)
    ranks = [r for r, h in enumerate(per_rank_hbm) if abs(h - value) <= 1024**2]
    return f"{label} HBM: {_gb(value)} GB on {'ranks' if len(ranks) > 1 else 'rank'} {ranks}"


def _kernel_storage_lines(plan: Any, best_plan: Sequence[ShardingOption]) -> list[str]:
    """Per kernel, the summed storage of its tables: from the plan's own stats when it has them
    (our search: device memory, HBM on accelerators, DDR on cpu), else from the placed options
    (TorchRec's loop; reading `best_plan` of our search would enumerate the model again)."""
    totals: dict[str, Storage] = {}
    stats = getattr(plan, "stats", None)
    if stats is not None:
        accel = stats.compute_device != "cpu"
        for t in stats.tables:
            add = Storage(hbm=t.memory_bytes if accel else 0, ddr=0 if accel else t.memory_bytes)
            totals[t.compute_kernel] = totals.get(t.compute_kernel, Storage(hbm=0, ddr=0)) + add
    else:
        for option in best_plan:
            kernel = option.compute_kernel
            totals[kernel] = totals.get(kernel, Storage(hbm=0, ddr=0)) + option.total_storage
    if not totals:
        return []
    lines = [_row("Compute Kernels Total Estimated Memory (weights + optimizer + IO + pipeline):")]
    for kernel, s in totals.items():
        lines.append(
            _row(f"   {kernel}: HBM: {_gb(s.hbm)} GB, DDR: {_gb(s.ddr)} GB, SSD: {_gb(s.ssd)} GB")
        )
    return lines


def _tables_per_rank(plan: Any, world: int) -> list[list[str]]:
    names: list[list[str]] = [[] for _ in range(world)]
    for tables in getattr(plan, "plan", {}).values():
        for name, ps in tables.items():
            for rank in sorted(set(getattr(ps, "ranks", []))):
                if 0 <= rank < world:
                    names[rank].append(name)
    return names


class EmbeddingStats:
    """Builds and logs the plan summary table (module docstring); `_stats_table` keeps it."""

    def __init__(self) -> None:
        self._stats_table: list[str] = []

    def log(
        self,
        sharding_plan: Any,
        topology: Topology,
        batch_size: int,
        storage_reservation: object,
        num_proposals: int,
        num_plans: int,
        run_time: float,
        best_plan: Sequence[ShardingOption],
        constraints: Mapping[str, ParameterConstraints] | None = None,
        sharders: Sequence[object] | None = None,
        debug: bool = True,
        enumerator: object | None = None,
    ) -> None:
        world = topology.world_size
        per_rank = _per_rank_from_plan(sharding_plan, world)
        if per_rank is None:
            per_rank = _per_rank_from_options(best_plan, world)
        tables = _tables_per_rank(sharding_plan, world)
        all_tables = [name for module in sharding_plan.plan.values() for name in module]
        hardcoded = sum(
            1
            for name in all_tables
            if constraints is not None
            and name in constraints
            and constraints[name].compute_kernels is not None
        )
        lines = ["#" * _WIDTH, _row("--- Planner Statistics ---")]
        lines.append(
            _row(
                f"--- Evaluated {num_proposals} proposal(s), found {num_plans} possible "
                f"plan(s), ran for {run_time:.2f}s ---"
            )
        )
        lines.append(
            _row(
                f"Topology: {world} rank(s), {topology.local_size} per host, compute device "
                f"{topology.compute_device}, batch size {batch_size} per rank"
            )
        )
        lines.append(
            _row(f"{'Rank':>5} {'HBM (GB)':>10} {'DDR (GB)':>10} {'Perf (ms)':>11}  Tables")
        )
        for rank, (hbm, ddr, perf) in enumerate(per_rank):
            placed = ", ".join(tables[rank][:6]) + (" ..." if len(tables[rank]) > 6 else "")
            lines.append(
                _row(f"{rank:>5} {hbm / _GB:>10.3f} {ddr / _GB:>10.3f} {perf:>11.3f}  {placed}")
            )
        top_hbm = max((h for h, _, _ in per_rank), default=0.0)
        lines.append(_row(f"Top HBM Memory Usage Estimation: {top_hbm / _GB:.3f} GB"))
        for label in ("Max", "Min"):
            lines.append(_row(_rank_hbm_text(label, [h for h, _, _ in per_rank])))
        lines.extend(_kernel_storage_lines(sharding_plan, best_plan))
        lines.append(
            _row(
                f"Compute Kernel Constraints: Hardcoded: {hardcoded}, "
                f"Auto-selected: {len(all_tables) - hardcoded}"
            )
        )
        lines.append(_row(f"Storage reservation: {type(storage_reservation).__name__}"))
        lines.append("#" * _WIDTH)
        self._stats_table = lines
        for line in lines:
            logger.info(line)


class NoopEmbeddingStats:
    """Stats that record nothing (TorchRec's `NoopEmbeddingStats`): a planner with it is quiet."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        """Takes EmbeddingStats.log's arguments and records nothing."""
        del args, kwargs
