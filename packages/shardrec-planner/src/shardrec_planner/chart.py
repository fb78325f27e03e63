"""A PNG chart of a plan's per-rank memory and estimated cost (needs matplotlib)."""

from __future__ import annotations

import pathlib

from shardrec_planner.sharding_plan import ShardingPlan


def save_plan_chart(plan: ShardingPlan, path: str | pathlib.Path) -> pathlib.Path:
    """Write two bar charts (memory per rank against the cap, cost per rank against the lower
    bound) to `path` as PNG. Raises ValueError for a plan without planner stats."""
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
    except ImportError as err:  # matplotlib is an optional dependency
        raise ImportError(
            "save_plan_chart needs matplotlib: pip install 'shardrec-planner[plot]'"
        ) from err

    ranks = [r.rank for r in stats.ranks]
    gib = [r.memory_bytes / 1024**3 for r in stats.ranks]
    ms = [r.cost_s * 1e3 for r in stats.ranks]
    fig, (ax_mem, ax_cost) = plt.subplots(2, 1, figsize=(max(6.0, min(24.0, len(ranks) * 0.3)), 6))
    ax_mem.bar(ranks, gib, color="tab:blue")
    if stats.ranks:
        ax_mem.axhline(stats.ranks[0].memory_cap_bytes / 1024**3, color="red", ls="--", label="cap")
    ax_mem.set_ylabel("memory (GiB)")
    ax_mem.legend(loc="upper right")
    ax_cost.bar(ranks, ms, color="tab:orange")
    ax_cost.axhline(stats.lower_bound_s * 1e3, color="green", ls="--", label="lower bound")
    ax_cost.set_ylabel("est. step time (ms)")
    ax_cost.set_xlabel("rank")
    ax_cost.legend(loc="upper right")
    fig.suptitle(
        f"slowest rank {stats.max_cost_s * 1e3:.3f} ms, gap to bound "
        f"{100 * stats.gap_to_lower_bound:.1f}%, imbalance {stats.imbalance:.2f}"
    )
    fig.tight_layout()
    out = pathlib.Path(path)
    fig.savefig(out, format="png", dpi=80)
    plt.close(fig)
    return out
