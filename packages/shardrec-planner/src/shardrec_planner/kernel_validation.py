"""Checks that each chosen ShardingOption's compute kernel is consistent with its shards.

TorchRec's planner runs this on its final proposal (`validate_compute_kernels`); it is here for
TorchRec-style parts (a user's proposer or partitioner) whose output our code consumes. Every
violation is listed, not only the first.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.errors import PlannerError, PlannerErrorType
from shardrec_planner.planner_types import ShardingOption

_CACHING = (EmbeddingComputeKernel.FUSED_UVM_CACHING, EmbeddingComputeKernel.QUANT_UVM_CACHING)


def _violations(option: ShardingOption) -> list[str]:
    where = f"table {option.fqn!r}"
    try:
        kernel = EmbeddingComputeKernel(option.compute_kernel)
    except ValueError:
        return [f"{where}: unknown compute kernel {option.compute_kernel!r}"]
    found: list[str] = []
    if (
        kernel is EmbeddingComputeKernel.DENSE
        and option.sharding_type != ShardingType.DATA_PARALLEL.value
    ):
        found.append(
            f"{where}: DENSE kernel requires DATA_PARALLEL sharding, got "
            f"{option.sharding_type!r}; use 'fused' for sharded tables"
        )
    if kernel in _CACHING:
        load = option.cache_load_factor
        if load is not None and not 0.0 < load < 1.0:
            found.append(
                f"{where}: {kernel.value} needs a cache_load_factor in (0, 1), got {load}; "
                "use 'fused' for a fully cached table or 'fused_uvm' for no cache"
            )
        for shard in option.shards:
            if shard.storage is not None and shard.storage.hbm < 0:
                found.append(f"{where}: shard at {shard.offset} has negative HBM storage")
            if shard.storage is not None and shard.storage.ddr < 0:
                found.append(f"{where}: shard at {shard.offset} has negative DDR storage")
    return found


def validate_compute_kernels(plan: Sequence[ShardingOption]) -> None:
    """Raise PlannerError (INVALID_COMPUTE_KERNEL) listing every inconsistent kernel choice."""
    found = [v for option in plan for v in _violations(option)]
    if found:
        raise PlannerError(
            f"{len(found)} violation(s) of compute kernel rules:\n  " + "\n  ".join(found),
            error_type=PlannerErrorType.INVALID_COMPUTE_KERNEL,
        )
