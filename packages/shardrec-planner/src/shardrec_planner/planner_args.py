"""The checks of `EmbeddingShardingPlanner`'s arguments: each bad value is refused with an error
naming it and the fix, before any planning; TorchRec's aliases are resolved to ours."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.embedding_stats import EmbeddingStats
from shardrec_planner.storage_reservations import HeuristicalStorageReservation, StorageReservation

DEFAULT_BATCH_SIZE = 512

__all__ = ["DEFAULT_BATCH_SIZE", "PlannerArgs", "planner_args"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannerArgs:
    """The planner's checked arguments (`planner_args`)."""

    batch_size: int
    constraints: dict[str, ParameterConstraints]
    time_budget_s: float
    storage_reservation: StorageReservation | None
    tier_store_dir: str | None
    stats: list[Any]


def planner_args(
    *,
    batch_size: int | None,
    constraints: Mapping[str, ParameterConstraints] | None,
    memory_reserve_fraction: float,
    time_budget_s: float,
    timeout_seconds: float | None,
    storage_reservation: StorageReservation | None,
    heuristical_storage_reservation_percentage: float | None,
    tier_store_dir: str | None,
    stats: Any,
) -> PlannerArgs:
    """The arguments checked, with their defaults: batch size 512, `timeout_seconds` (TorchRec's
    name) for `time_budget_s`, a `HeuristicalStorageReservation` of TorchRec's percentage
    argument, `[EmbeddingStats()]` for `stats=None`."""
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
    if timeout_seconds is not None:
        time_budget_s = timeout_seconds
    if storage_reservation is None and heuristical_storage_reservation_percentage is not None:
        storage_reservation = HeuristicalStorageReservation(
            percentage=heuristical_storage_reservation_percentage
        )
    if storage_reservation is not None and not callable(
        getattr(storage_reservation, "reserve", None)
    ):
        raise TypeError(
            "storage_reservation must have a reserve(topology, batch_size, module, "
            f"sharders, constraints) method, got {type(storage_reservation).__name__}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0.0 <= memory_reserve_fraction < 1.0:
        raise ValueError(
            f"memory_reserve_fraction must be in [0, 1), got {memory_reserve_fraction}"
        )
    if time_budget_s <= 0:
        raise ValueError(f"time_budget_s must be > 0, got {time_budget_s}")
    for name, c in (constraints or {}).items():
        if not isinstance(c, ParameterConstraints):
            raise TypeError(
                f"constraints[{name!r}] must be a ParameterConstraints, got {type(c).__name__}"
            )
    if tier_store_dir is not None and (not isinstance(tier_store_dir, str) or not tier_store_dir):
        raise ValueError(
            f"tier_store_dir must be a non-empty path string or None, got {tier_store_dir!r}"
        )
    if stats is None:
        stats = [EmbeddingStats()]
    stats_list: list[Any] = list(stats) if isinstance(stats, (list, tuple)) else [stats]
    for s in stats_list:
        if not callable(getattr(s, "log", None)):
            raise TypeError(f"stats must have a log(...) method, got {type(s).__name__}")
    return PlannerArgs(
        batch_size=batch_size,
        constraints=dict(constraints or {}),
        time_budget_s=time_budget_s,
        storage_reservation=storage_reservation,
        tier_store_dir=tier_store_dir,
        stats=stats_list,
    )
