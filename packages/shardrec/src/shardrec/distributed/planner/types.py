"""Planner inputs, value types and errors (TorchRec path `torchrec.distributed.planner.types`)."""

from shardrec_planner import ParameterConstraints, PlannerError, Topology
from shardrec_planner.errors import PlannerErrorType
from shardrec_planner.planner_types import DeviceHardware, Perf, Shard, ShardingOption, Storage
from shardrec_planner.storage_reservations import StorageReservation

__all__ = [
    "DeviceHardware",
    "ParameterConstraints",
    "Perf",
    "PlannerError",
    "PlannerErrorType",
    "Shard",
    "ShardingOption",
    "Storage",
    "StorageReservation",
    "Topology",
]
