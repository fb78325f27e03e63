"""TorchRec's trivial plan ratings (`torchrec.distributed.planner.perf_models`).

A perf model rates a whole placed plan (every shard has its rank): lower is better. These two
rate by the busiest rank, in time or in device memory; TorchRec's planner picks the proposal with
the lowest rating.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_planner.planner_types import ShardingOption
from shardrec_planner.topology import Topology


def _per_rank(plan: Sequence[ShardingOption], world_size: int, what: str) -> list[float]:
    totals = [0.0] * world_size
    for option in plan:
        for shard in option.shards:
            if shard.rank is None or not 0 <= shard.rank < world_size:
                raise ValueError(
                    f"table {option.name!r}: shard rank {shard.rank!r} is not in "
                    f"[0, {world_size}); rate a partitioned plan"
                )
            if what == "perf":
                if shard.perf is None:
                    raise ValueError(f"table {option.name!r}: a shard has no perf estimate")
                totals[shard.rank] += shard.perf.total
            else:
                if shard.storage is None:
                    raise ValueError(f"table {option.name!r}: a shard has no storage estimate")
                totals[shard.rank] += shard.storage.hbm
    return totals


class NoopPerfModel:
    """Rates a plan by the largest per-rank sum of shard perf totals (ms)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology

    def rate(self, plan: Sequence[ShardingOption]) -> float:
        return max(_per_rank(plan, self._topology.world_size, "perf"))


class NoopStorageModel:
    """Rates a plan by the largest per-rank sum of shard device memory (bytes of HBM)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology

    def rate(self, plan: Sequence[ShardingOption]) -> float:
        return max(_per_rank(plan, self._topology.world_size, "hbm"))
