"""Planner inputs, value types and errors (TorchRec path `torchrec.distributed.planner.types`)."""

from shardrec_planner import ParameterConstraints, PlannerError, Topology
from shardrec_planner.enumerators import ShardEstimator
from shardrec_planner.errors import InvalidValueError, PlannerErrorType
from shardrec_planner.planner_types import (
    DeviceHardware,
    PartitionByType,
    Perf,
    Shard,
    ShardingOption,
    Storage,
)
from shardrec_planner.pluggable import PlanLoader
from shardrec_planner.proposers import Proposer
from shardrec_planner.shard_storage import PipelineType
from shardrec_planner.storage_reservations import StorageReservation

__all__ = [
    "DeviceHardware",
    "InvalidValueError",
    "ParameterConstraints",
    "PartitionByType",
    "Perf",
    "PipelineType",
    "PlanLoader",
    "PlannerError",
    "PlannerErrorType",
    "Proposer",
    "Shard",
    "ShardEstimator",
    "ShardingOption",
    "Storage",
    "StorageReservation",
    "Topology",
]
