"""Planner inputs, value types and errors (TorchRec path `torchrec.distributed.planner.types`)."""

# TorchRec's module has `logging` as a global, and its users' tests patch
# `...planner.types.logging`; the name must exist here for that patch to apply.
import logging  # noqa: F401

from shardrec_planner import ParameterConstraints, PlannerError, ShardingPlan, Topology
from shardrec_planner.enumerators import ShardEstimator
from shardrec_planner.errors import InvalidValueError, PlannerErrorType
from shardrec_planner.hashing import (
    hash_planner_context_inputs,
    hash_planner_context_inputs_str,
    hash_sha256_str,
    hash_sha256_to_int,
    round_to_nearest,
)
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
from shardrec_planner.sharder_data import SharderData
from shardrec_planner.storage_reservations import StorageReservation
from shardrec_planner.topology_factory import (
    HardwareConfig,
    KernelConfig,
    TopologyConfigBase,
    TopologyFactory,
    TrainerConfig,
)
from shardrec_planner.topology_parts import (
    BasicCommsBandwidths,
    CollectiveType,
    CustomTopologyData,
    GeneralizedCommsBandwidth,
)

__all__ = [
    "BasicCommsBandwidths",
    "CollectiveType",
    "CustomTopologyData",
    "DeviceHardware",
    "GeneralizedCommsBandwidth",
    "HardwareConfig",
    "InvalidValueError",
    "KernelConfig",
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
    "SharderData",
    "ShardingOption",
    "ShardingPlan",
    "Storage",
    "StorageReservation",
    "Topology",
    "TopologyConfigBase",
    "TopologyFactory",
    "TrainerConfig",
    "hash_planner_context_inputs",
    "hash_planner_context_inputs_str",
    "hash_sha256_str",
    "hash_sha256_to_int",
    "round_to_nearest",
]
