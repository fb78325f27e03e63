"""A PNG chart of a plan's per-rank memory and estimated step time (needs matplotlib).

Two panels side by side, one bar per rank: the memory a rank's tables take (with each bar's
share of the cap) and its estimated step time (with the mean and the lower bound). Units
follow the data (KiB to TiB, microseconds to seconds), so small tables on a large machine
still show their balance; the cap is drawn only when it is on the bars' scale and otherwise
named in the panel's title. `plan_chart_data` computes what is drawn.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence

from shardrec_planner.sharding_plan import ShardingPlan
from shardrec_planner.stats import PlanStats

_BYTE_UNITS = (
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1024.0**2),
    ("GiB", 1024.0**3),
    ("TiB", 1024.0**4),
)
_TIME_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))
CAP_SCALE = 4.0
"""The cap line is drawn when it is at most this many times the largest bar."""


def _unit(values: Sequence[float], units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """The largest unit in which the largest value is at least 1 (the smallest one for zeros)."""
    top = max(values, default=0.0)
    chosen = units[0]
    for unit in units:
        if top >= unit[1]:
            chosen = unit
    return chosen


def _with_unit(value: float, units: Sequence[tuple[str, float]]) -> str:
    """`value` in its own best unit: `108.8 GiB`."""
    name, scale = _unit([value], units)
    return f"{value / scale:.1f} {name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanChartData:
    """What `save_plan_chart` draws: per-rank values in the units of their labels (the cap in
    the memory's unit, the lower bound in the cost's); the rest follows from them."""

    ranks: tuple[int, ...]
    memory: tuple[float, ...]
    memory_unit: str
    memory_cap: float
    memory_cap_text: str
    cost: tuple[float, ...]
    cost_unit: str
    cost_lower_bound: float

    @property
    def cap_on_scale(self) -> bool:
        """Whether the cap is drawn as a line (it is within `CAP_SCALE` of the largest bar)."""
        return self.memory_cap <= CAP_SCALE * max(self.memory, default=0.0)

    @property
    def used_percent(self) -> tuple[float, ...]:
        """Each rank's memory as a percentage of the cap (0 without a cap)."""
        cap = self.memory_cap
        return tuple(100.0 * m / cap if cap > 0 else 0.0 for m in self.memory)

    @property
    def cost_mean(self) -> float:
        return sum(self.cost) / len(self.cost) if self.cost else 0.0


def plan_chart_data(stats: PlanStats) -> PlanChartData:
    """Per-rank memory and cost of `stats`, scaled to units that fit the largest bar."""
    memory = [float(r.memory_bytes) for r in stats.ranks]
    cap = float(stats.ranks[0].memory_cap_bytes) if stats.ranks else 0.0
    mem_unit, mem_scale = _unit(memory, _BYTE_UNITS)
    cost = [r.cost_s for r in stats.ranks]
    time_unit, time_scale = _unit([*cost, stats.lower_bound_s], _TIME_UNITS)
    return PlanChartData(
        ranks=tuple(r.rank for r in stats.ranks),
        memory=tuple(m / mem_scale for m in memory),
        memory_unit=mem_unit,
        memory_cap=cap / mem_scale,
        memory_cap_text=_with_unit(cap, _BYTE_UNITS),
        cost=tuple(c / time_scale for c in cost),
        cost_unit=time_unit,
        cost_lower_bound=stats.lower_bound_s / time_scale,
    )


def save_plan_chart(plan: ShardingPlan, path: str | pathlib.Path) -> pathlib.Path:
    """Write the per-rank memory and step-time bars of `plan` to `path` as PNG. Raises
    ValueError for a plan without planner stats."""
    stats = plan.stats
    if stats is None:
        raise ValueError(
            "this plan has no planner stats to chart; plan it with EmbeddingShardingPlanner.plan() "
            "or add them with EmbeddingShardingPlanner.estimate()"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as err:  # matplotlib is an optional dependency
        raise ImportError(
            "save_plan_chart needs matplotlib: pip install 'shardrec-planner[plot]'"
        ) from err

    data = plan_chart_data(stats)
    width = max(8.0, min(24.0, len(data.ranks) * 0.6))
    fig, (ax_mem, ax_cost) = plt.subplots(1, 2, figsize=(width, 4))
    bars = ax_mem.bar(data.ranks, data.memory, color="tab:blue")
    if len(data.ranks) <= 16:
        ax_mem.bar_label(bars, labels=[f"{p:.2g}%" for p in data.used_percent], fontsize=8)
    top = max(data.memory, default=0.0)
    if data.cap_on_scale:
        ax_mem.axhline(data.memory_cap, color="red", ls="--", label=f"cap {data.memory_cap_text}")
        ax_mem.legend(loc="upper right")
        top = max(top, data.memory_cap)
        ax_mem.set_title("table memory per rank (% of cap)")
    else:
        ax_mem.set_title(f"table memory per rank (% of the {data.memory_cap_text} cap)")
    ax_mem.set_ylim(0, top * 1.3 or 1.0)
    ax_mem.set_ylabel(f"memory ({data.memory_unit})")
    ax_cost.bar(data.ranks, data.cost, color="tab:orange")
    ax_cost.axhline(data.cost_mean, color="black", ls=":", label="mean")
    ax_cost.axhline(data.cost_lower_bound, color="green", ls="--", label="lower bound")
    ax_cost.set_ylabel(f"est. step time ({data.cost_unit})")
    ax_cost.set_title(f"compute per rank (imbalance {stats.imbalance:.2f})")
    ax_cost.legend(loc="upper right", ncol=2)
    ax_cost.set_ylim(0, max(*data.cost, data.cost_lower_bound, 0.0) * 1.3 or 1.0)
    for ax in (ax_mem, ax_cost):
        ax.set_xlabel("rank")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(
        f"slowest rank {stats.max_cost_s * 1e3:.3g} ms, gap to bound "
        f"{100 * stats.gap_to_lower_bound:.1f}%"
    )
    fig.tight_layout()
    out = pathlib.Path(path)
    fig.savefig(out, format="png", dpi=80)
    plt.close(fig)
    return out
