"""Plain-text rendering of plans and planner stats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.kernel_choice import executed_kernel, kernel_notes, runs_tiered

if TYPE_CHECKING:
    from shardrec_planner.sharding_plan import ShardingPlan
    from shardrec_planner.stats import PlanStats, TableDecision, TierShard


def format_bytes(n: float) -> str:
    """`1536` -> `1.5 KiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024.0 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    raise AssertionError("unreachable")


def format_seconds(s: float) -> str:
    """Step-time estimates read best in milliseconds."""
    return f"{s * 1e3:.3f} ms"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _ranks_text(ranks: Sequence[int]) -> str:
    if len(ranks) > 6:
        return f"[{ranks[0]}..{ranks[-1]}] ({len(ranks)} shards)"
    return "[" + ",".join(str(r) for r in ranks) + "]"


def _kernel_text(kernel: str, tiered: bool = False) -> str:
    """`fused_uvm_caching->fused` where the kernel asked for is not the one that runs;
    `key_value (tiered)` for a table on the disk tier."""
    if tiered:
        return f"{kernel} (tiered)"
    runs = executed_kernel(kernel).value
    return kernel if runs == kernel else f"{kernel}->{runs}"


def _runs_tiered(t: TableDecision) -> bool:
    """A `key_value` table runs tiered on every sharding type but data_parallel (`runs_tiered`),
    also where the cost model priced it as fused (no `tier`)."""
    return (
        t.compute_kernel == EmbeddingComputeKernel.KEY_VALUE.value
        and t.sharding_type != ShardingType.DATA_PARALLEL.value
    )


def format_kernel_notes(plan: ShardingPlan) -> str:
    """The kernels and cache options section: per table, what became of what it asked for."""
    lines = [
        f"  {(path + '.') if path else ''}{name}: {note}"
        for path, tables in plan.plan.items()
        for name, ps in tables.items()
        for note in kernel_notes(ps, plan.stats.compute_device if plan.stats else None)
    ]
    return "kernels and cache options\n" + "\n".join(lines) if lines else ""


def format_plan(plan: ShardingPlan) -> str:
    """One table per module: table, type, kernel, ranks and each shard's rows x cols @ placement."""
    parts: list[str] = []
    for path, tables in plan.plan.items():
        rows: list[list[str]] = []
        for name, ps in tables.items():
            if ps.sharding_spec is None:
                shards = "replicated"
            else:
                items = [
                    f"({s.shard_offsets[0]},{s.shard_offsets[1]})+"
                    f"{s.shard_sizes[0]}x{s.shard_sizes[1]}@{s.placement}"
                    for s in ps.sharding_spec.shards
                ]
                more = len(items) - 4
                shards = " ".join(items[:4]) + (f" ... (+{more})" if more > 0 else "")
            rows.append(
                [
                    name,
                    ps.sharding_type.value,
                    _kernel_text(ps.compute_kernel.value, runs_tiered(ps)),
                    _ranks_text(ps.ranks),
                    shards,
                ]
            )
        title = f"module {path!r}" if path else "module '' (root)"
        parts.append(title + "\n" + _table(["table", "type", "kernel", "ranks", "shards"], rows))
    notes = format_kernel_notes(plan)
    if notes:
        parts.append(notes)
    return "\n\n".join(parts) if parts else "empty sharding plan"


def format_tiers(stats: PlanStats) -> str:
    """The disk tier section: per tiered table, its tier, cache, expected hit rate and disk
    traffic per step; empty when no table is tiered."""
    lines = []
    for t in stats.tables:
        tier = t.tier
        if tier is None:
            continue
        name = (t.module_path + "." if t.module_path else "") + t.table
        lines.append(
            f"  {name}: tier {_tier_where(t.compute_kernel)} ({t.compute_kernel}), store "
            f"{format_bytes(tier.disk_bytes)}; "
            f"cache {tier.cache_rows:,} rows (load_factor {tier.load_factor:g}, "
            f"{format_bytes(tier.cache_bytes)} in memory); expected hit rate "
            f"{tier.hit_rate:.3f} ({tier.hit_rate_source}); disk per step "
            f"{format_bytes(tier.read_bytes_per_step)} read + "
            f"{format_bytes(tier.write_bytes_per_step)} written "
            f"({format_seconds(tier.disk_seconds_per_step)})"
        )
        if len(tier.shards) > 1:
            lines += [_tier_shard_line(i, s) for i, s in enumerate(tier.shards)]
    if not lines:
        return ""
    used = max(r.disk_bytes for r in stats.ranks)
    return f"disk tier (largest per-rank store total {format_bytes(used)})\n" + "\n".join(lines)


def _tier_where(kernel: str) -> str:
    """Where a tiered table's store lives: RAM for `dram_virtual_table`, else disk."""
    return "RAM" if kernel == EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE.value else "disk"


def _tier_shard_line(i: int, s: TierShard) -> str:
    """One shard of a tiered table: its block, its store, its cache and its disk traffic."""
    return (
        f"    shard {i} on rank {s.rank}: rows {s.row_offset:,}-{s.row_offset + s.rows - 1:,} x "
        f"cols {s.col_offset}-{s.col_offset + s.cols - 1}; store {format_bytes(s.disk_bytes)}; "
        f"cache {s.cache_rows:,} rows ({format_bytes(s.cache_bytes)}); disk per step "
        f"{format_bytes(s.read_bytes_per_step)} read + as many written "
        f"({format_seconds(s.disk_seconds_per_step)})"
    )


def format_report(plan: ShardingPlan) -> str:
    """The plan plus, when the planner made it, per-rank load and per-table reasons."""
    stats = plan.stats
    if stats is None:
        return format_plan(plan) + "\n\n(no planner stats: this plan was written by hand)"
    rank_rows = [
        [
            str(r.rank),
            format_bytes(r.memory_bytes),
            format_bytes(r.memory_cap_bytes),
            f"{100.0 * r.memory_bytes / max(r.memory_cap_bytes, 1):.1f}%",
            format_seconds(r.cost_s),
        ]
        for r in stats.ranks
    ]
    table_rows = [
        [
            (t.module_path + "." if t.module_path else "") + t.table,
            t.sharding_type,
            _kernel_text(t.compute_kernel, t.tier is not None or _runs_tiered(t)),
            _ranks_text(t.ranks),
            format_bytes(t.memory_bytes),
            format_seconds(t.cost_s),
            t.reason,
        ]
        for t in stats.tables
    ]
    summary = [
        f"batch size per rank: {stats.batch_size}; compute device: {stats.compute_device}",
        *([stats.memory_source] if stats.memory_source else []),
        f"slowest rank (estimated step time): {format_seconds(stats.max_cost_s)}",
        f"lower bound: {format_seconds(stats.lower_bound_s)} "
        f"(gap {100.0 * stats.gap_to_lower_bound:.1f}%)",
        f"imbalance (max / mean rank cost): {stats.imbalance:.3f}",
        f"search time: {stats.search_seconds:.3f} s",
    ]
    return "\n\n".join(
        [
            "per-rank estimates\n"
            + _table(["rank", "memory", "cap", "used", "est. cost"], rank_rows),
            "per-table decisions\n"
            + _table(["table", "type", "kernel", "ranks", "memory", "cost", "why"], table_rows),
            "\n".join(summary),
            *([tiers] if (tiers := format_tiers(stats)) else []),
            *([notes] if (notes := format_kernel_notes(plan)) else []),
        ]
    )
