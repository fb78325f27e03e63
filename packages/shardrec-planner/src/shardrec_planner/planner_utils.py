"""Small helpers of TorchRec's planner parts (`torchrec.distributed.planner.utils`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from shardrec_planner.enums import ShardingType
from shardrec_planner.planner_types import ShardingOption, Storage

_GIB = 1024 * 1024 * 1024
_MIB = 1024 * 1024


def bytes_to_gb(num_bytes: float) -> float:
    return float(num_bytes / _GIB)


def bytes_to_mb(num_bytes: float) -> float:
    return float(num_bytes / _MIB)


def gb_to_bytes(gb: float) -> int:
    return int(gb * _GIB)


def mb_to_bytes(mb: float) -> int:
    return int(mb * _MIB)


def prod(iterable: Iterable[int]) -> int:
    return math.prod(iterable)


def sharder_name(t: type) -> str:
    """The key TorchRec's planner files a sharder under: its module type's qualified name."""
    return f"{t.__module__}.{t.__name__}"


def storage_repr_in_gb(storage: Storage | None) -> str:
    if storage is None:
        return ""
    hbm = round(bytes_to_gb(storage.hbm), 3)
    ddr = round(bytes_to_gb(storage.ddr), 3)
    return f"Storage(hbm = {hbm} GB, ddr = {ddr} GB)"


def reset_shard_rank(proposal: Sequence[ShardingOption]) -> None:
    """Unplace every shard of `proposal` (a partitioner assigns ranks afresh)."""
    for option in proposal:
        for shard in option.shards:
            shard.rank = None


def _rank_load(option_name: str, shard_value: float | None, what: str) -> float:
    if shard_value is None:
        raise ValueError(f"table {option_name!r}: a shard has no {what} estimate")
    return shard_value


def find_imbalance_tables(
    sharding_options: Sequence[ShardingOption], target_imbalance: str = "perf"
) -> list[ShardingOption]:
    """The tables on every most-loaded rank, heaviest first, that moving could rebalance.

    Load is the sum of shard perf totals ("perf") or of shard HBM bytes ("hbm") per rank.
    Data-parallel and row-wise tables sit on every rank alike, so they are never the cause.
    Empty for a single rank.
    """
    if target_imbalance not in ("perf", "hbm"):
        raise ValueError(f"target_imbalance must be 'perf' or 'hbm', got {target_imbalance!r}")

    def load(option: ShardingOption, index: int) -> float:
        shard = option.shards[index]
        if target_imbalance == "perf":
            return _rank_load(option.name, None if shard.perf is None else shard.perf.total, "perf")
        hbm = None if shard.storage is None else shard.storage.hbm
        return _rank_load(option.name, hbm, "storage")

    per_rank: dict[int | None, float] = {}
    for option in sharding_options:
        for i, shard in enumerate(option.shards):
            per_rank[shard.rank] = per_rank.get(shard.rank, 0.0) + load(option, i)
    if len(per_rank) <= 1:
        return []
    peak = max(per_rank.values())
    peak_ranks = {rank for rank, value in per_rank.items() if value == peak}
    spread = (ShardingType.DATA_PARALLEL.value, ShardingType.ROW_WISE.value)
    found = [
        option
        for option in sharding_options
        if {shard.rank for shard in option.shards} >= peak_ranks
        and option.sharding_type not in spread
    ]
    found.sort(key=lambda option: load(option, 0), reverse=True)
    return found
