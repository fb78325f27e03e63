"""What the planner reports with a plan: per-rank load, per-table decisions, the lower bound."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


def _int(data: Mapping[str, object], key: str, default: int | None = None) -> int:
    """`data[key]` as read back from JSON, which must be an integer."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"plan stats field {key!r} must be an integer, got {value!r}")
    return value


def _float(data: Mapping[str, object], key: str) -> float:
    """`data[key]` as read back from JSON, which must be a number (JSON writes 1.0 as 1.0, but
    hand-written files may say 1)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"plan stats field {key!r} must be a number, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankStats:
    """One rank's estimated memory (bytes) and step time (seconds) under the plan."""

    rank: int
    memory_bytes: int
    memory_cap_bytes: int
    cost_s: float
    host_memory_bytes: int = 0
    """Host memory used by UVM kernels (GPUs only)."""
    disk_bytes: int = 0
    """Disk used by tiered tables' stores."""

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(data: dict[str, object]) -> RankStats:
        return RankStats(
            rank=_int(data, "rank"),
            memory_bytes=_int(data, "memory_bytes"),
            memory_cap_bytes=_int(data, "memory_cap_bytes"),
            cost_s=_float(data, "cost_s"),
            host_memory_bytes=_int(data, "host_memory_bytes", 0),
            disk_bytes=_int(data, "disk_bytes", 0),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TierShard:
    """One tiered shard's figures (disk_tier.py): its rank, its block of the table (offsets and
    sizes of rows and columns), its cache (rows, bytes in memory), its store on disk and its disk
    bytes read per step (as many are written back) and the seconds they add."""

    rank: int
    row_offset: int
    rows: int
    col_offset: int
    cols: int
    cache_rows: int
    cache_bytes: int
    disk_bytes: int
    read_bytes_per_step: float
    disk_seconds_per_step: float

    @staticmethod
    def from_dict(data: Mapping[str, object]) -> TierShard:
        return TierShard(
            rank=_int(data, "rank"),
            row_offset=_int(data, "row_offset"),
            rows=_int(data, "rows"),
            col_offset=_int(data, "col_offset"),
            cols=_int(data, "cols"),
            cache_rows=_int(data, "cache_rows"),
            cache_bytes=_int(data, "cache_bytes"),
            disk_bytes=_int(data, "disk_bytes"),
            read_bytes_per_step=_float(data, "read_bytes_per_step"),
            disk_seconds_per_step=_float(data, "disk_seconds_per_step"),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TierDecision:
    """A tiered table's cache and disk figures (disk_tier.py), over all its shards: cached
    share and rows, memory of the cache (rows, state, metadata, id map), store bytes on disk,
    expected hit rate and where it came from, disk bytes read and written per step and the
    seconds they add to the step."""

    load_factor: float
    cache_rows: int
    cache_bytes: int
    disk_bytes: int
    hit_rate: float
    hit_rate_source: str
    read_bytes_per_step: float
    write_bytes_per_step: float
    disk_seconds_per_step: float
    shards: tuple[TierShard, ...] = ()
    """Per shard, in shard order (the figures above are their sums; the hit rate is every
    shard's)."""

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["shards"] = [dataclasses.asdict(s) for s in self.shards]
        return out

    @staticmethod
    def from_dict(data: Mapping[str, object]) -> TierDecision:
        return TierDecision(
            load_factor=_float(data, "load_factor"),
            cache_rows=_int(data, "cache_rows"),
            cache_bytes=_int(data, "cache_bytes"),
            disk_bytes=_int(data, "disk_bytes"),
            hit_rate=_float(data, "hit_rate"),
            hit_rate_source=str(data.get("hit_rate_source", "")),
            read_bytes_per_step=_float(data, "read_bytes_per_step"),
            write_bytes_per_step=_float(data, "write_bytes_per_step"),
            disk_seconds_per_step=_float(data, "disk_seconds_per_step"),
            shards=_tier_shards(data),
        )


def _tier_shards(data: Mapping[str, object]) -> tuple[TierShard, ...]:
    """A tier's per-shard figures as read back from JSON (absent in older files: none)."""
    value = data.get("shards", [])
    if not isinstance(value, list) or not all(isinstance(s, Mapping) for s in value):
        raise ValueError(f"plan stats field 'shards' must be a list of objects, got {value!r}")
    return tuple(TierShard.from_dict(s) for s in value)


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
    tier: TierDecision | None = None
    """The disk tier's figures when the table is placed tiered."""

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["ranks"] = list(self.ranks)
        if self.tier is None:
            del out["tier"]
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
            memory_bytes=_int(data, "memory_bytes"),
            cost_s=_float(data, "cost_s"),
            max_shard_cost_s=_float(data, "max_shard_cost_s"),
            reason=str(data["reason"]),
            tier=TierDecision.from_dict(tier)
            if isinstance(tier := data.get("tier"), dict)
            else None,
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
    memory_source: str = ""
    """Where the per-rank memory cap came from (`Topology.memory_text`), for the report."""

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
            "memory_source": self.memory_source,
        }

    @staticmethod
    def from_dict(data: dict[str, object]) -> PlanStats:
        ranks, tables = data["ranks"], data["tables"]
        assert isinstance(ranks, list) and isinstance(tables, list)
        return PlanStats(
            ranks=tuple(RankStats.from_dict(r) for r in ranks),
            tables=tuple(TableDecision.from_dict(t) for t in tables),
            max_cost_s=_float(data, "max_cost_s"),
            lower_bound_s=_float(data, "lower_bound_s"),
            imbalance=_float(data, "imbalance"),
            batch_size=_int(data, "batch_size"),
            compute_device=str(data["compute_device"]),
            search_seconds=_float(data, "search_seconds"),
            memory_source=str(data.get("memory_source", "")),
        )
