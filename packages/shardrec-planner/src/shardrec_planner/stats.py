"""What the planner reports with a plan: per-rank load, per-table decisions, the lower bound."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankStats:
    """One rank's estimated memory (bytes) and step time (seconds) under the plan."""

    rank: int
    memory_bytes: int
    memory_cap_bytes: int
    cost_s: float
    host_memory_bytes: int = 0
    """Host memory used by UVM kernels (GPUs only)."""

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(data: dict[str, object]) -> RankStats:
        return RankStats(
            rank=int(str(data["rank"])),
            memory_bytes=int(str(data["memory_bytes"])),
            memory_cap_bytes=int(str(data["memory_cap_bytes"])),
            cost_s=float(str(data["cost_s"])),
            host_memory_bytes=int(str(data.get("host_memory_bytes", 0))),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableDecision:
    """Why one table was sharded the way it was.

    `cost_s` is the sum over its shards of their estimated step time; `max_shard_cost_s` the
    largest single shard (a rank can never be faster than its heaviest shard).
    """

    module_path: str
    table: str
    sharding_type: str
    compute_kernel: str
    ranks: tuple[int, ...]
    memory_bytes: int
    cost_s: float
    max_shard_cost_s: float
    reason: str

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["ranks"] = list(self.ranks)
        return out

    @staticmethod
    def from_dict(data: dict[str, object]) -> TableDecision:
        ranks = data["ranks"]
        assert isinstance(ranks, list)
        return TableDecision(
            module_path=str(data["module_path"]),
            table=str(data["table"]),
            sharding_type=str(data["sharding_type"]),
            compute_kernel=str(data["compute_kernel"]),
            ranks=tuple(int(r) for r in ranks),
            memory_bytes=int(str(data["memory_bytes"])),
            cost_s=float(str(data["cost_s"])),
            max_shard_cost_s=float(str(data["max_shard_cost_s"])),
            reason=str(data["reason"]),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanStats:
    """The planner's estimate for a whole plan.

    `max_cost_s` is the slowest rank's estimated step time, the number the search minimizes;
    `lower_bound_s` is a bound no plan can beat (see docs/planner.md); `imbalance` is
    max_cost_s / mean rank cost.
    """

    ranks: tuple[RankStats, ...]
    tables: tuple[TableDecision, ...]
    max_cost_s: float
    lower_bound_s: float
    imbalance: float
    batch_size: int
    compute_device: str
    search_seconds: float

    @property
    def gap_to_lower_bound(self) -> float:
        """max_cost_s / lower_bound_s - 1 (0.05 means within 5% of the bound)."""
        if self.lower_bound_s <= 0.0:
            return 0.0
        return self.max_cost_s / self.lower_bound_s - 1.0

    def to_dict(self) -> dict[str, object]:
        return {
            "ranks": [r.to_dict() for r in self.ranks],
            "tables": [t.to_dict() for t in self.tables],
            "max_cost_s": self.max_cost_s,
            "lower_bound_s": self.lower_bound_s,
            "imbalance": self.imbalance,
            "batch_size": self.batch_size,
            "compute_device": self.compute_device,
            "search_seconds": self.search_seconds,
        }

    @staticmethod
    def from_dict(data: dict[str, object]) -> PlanStats:
        ranks, tables = data["ranks"], data["tables"]
        assert isinstance(ranks, list) and isinstance(tables, list)
        return PlanStats(
            ranks=tuple(RankStats.from_dict(r) for r in ranks),
            tables=tuple(TableDecision.from_dict(t) for t in tables),
            max_cost_s=float(str(data["max_cost_s"])),
            lower_bound_s=float(str(data["lower_bound_s"])),
            imbalance=float(str(data["imbalance"])),
            batch_size=int(str(data["batch_size"])),
            compute_device=str(data["compute_device"]),
            search_seconds=float(str(data["search_seconds"])),
        )
