"""TorchRec's storage reservations: memory held back from each rank before tables are placed.

A reservation takes a topology and returns a copy whose `devices` have less storage: what the
dense part of the model, the input batches (KJTs) and a safety margin will use. TorchRec's three
policies (`torchrec.distributed.planner.storage_reservations`):

- `FixedPercentageStorageReservation(p)`: keep back p of every rank's HBM.
- `FixedAbsoluteStorageReservation(b)`: keep back b bytes of every rank's HBM.
- `HeuristicalStorageReservation(p)`: p of HBM, then the dense parameters times
  `parameter_multiplier` (parameter + optimizer state + DDP buffers, 6x by default), then the
  KJT batches (20 copies of the batch's ids: 2 pipelined batches, 10 internal copies each).

Dense and KJT storage count against HBM on accelerators and against DDR on cpu.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from torch import nn

from shardrec_planner.constants import BIGINT_DTYPE, POOLING_FACTOR
from shardrec_planner.constraints import DefaultPoolingFactors, ParameterConstraints
from shardrec_planner.errors import InvalidValueError, PlannerError, PlannerErrorType
from shardrec_planner.planner_types import Storage
from shardrec_planner.planner_utils import (
    bytes_to_gb,
    gb_to_bytes,
    sharder_name,
    storage_repr_in_gb,
)
from shardrec_planner.sharder import PlannerSharder
from shardrec_planner.topology import Topology

# Parameter + optimizer state (~2x) + DDP buffers (~3x), TorchRec's heuristic.
DENSE_PARAMETER_MULTIPLIER = 6.0
# Two pipelined batches, each with ten internal copies of its ids.
KJT_COPIES = 20


class StorageReservation(Protocol):
    """What the planner asks of a storage reservation (TorchRec's `StorageReservation`)."""

    def reserve(
        self,
        topology: Topology,
        batch_size: int,
        module: nn.Module,
        sharders: Sequence[PlannerSharder],
        constraints: Mapping[str, ParameterConstraints] | None = None,
    ) -> Topology: ...


def reserved_caps(reserved: object, by: object) -> tuple[float, float]:
    """(device bytes, host bytes) per rank that a reserved topology leaves for tables.

    The smallest rank bounds every rank (our search gives all ranks one cap). Device memory is
    HBM on accelerators and DDR on cpu; host memory (for UVM kernels) is DDR on accelerators
    and 0 on cpu.
    """
    if not isinstance(reserved, Topology):
        raise TypeError(
            f"{type(by).__name__}.reserve returned {type(reserved).__name__}, not a Topology"
        )
    cpu = reserved.compute_device == "cpu"
    device = min(d.storage.ddr if cpu else d.storage.hbm for d in reserved.devices)
    host = 0 if cpu else min(d.storage.ddr for d in reserved.devices)
    if device <= 0:
        raise PlannerError(
            f"{describe_reservation(by)} left {device} bytes per rank for embedding tables; "
            "reserve less (a lower percentage or fewer bytes) or use ranks with more memory",
            error_type=PlannerErrorType.INSUFFICIENT_STORAGE,
        )
    return float(device), float(max(host, 0))


def describe_reservation(reservation: object) -> str:
    """What a reservation keeps back, for messages: its own `describe()` if it has one."""
    describe = getattr(reservation, "describe", None)
    name = type(reservation).__name__
    return f"{name} ({describe()})" if callable(describe) else name


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _get_module_size(module: nn.Module, multiplier: float) -> int:
    """Bytes of `module`'s parameters (times `multiplier`) plus its buffers."""
    params = sum(multiplier * _tensor_bytes(p) for p in module.parameters())
    buffers = sum(_tensor_bytes(b) for b in module.buffers())
    return round(params + buffers)


def _on_device(topology: Topology, size: int) -> Storage:
    """`size` bytes on the tier the ranks compute from: HBM on accelerators, DDR on cpu."""
    cpu = topology.compute_device == "cpu"
    return Storage(hbm=0 if cpu else size, ddr=size if cpu else 0)


def _get_kjt_storage(
    topology: Topology,
    batch_inputs: Sequence[float],
    input_data_type_size: int,
    multiplier: int,
) -> Storage:
    """The storage `multiplier` copies of a batch's ids take (`batch_inputs` ids per feature)."""
    size = math.ceil(sum(batch_inputs) * float(input_data_type_size)) * multiplier
    return _on_device(topology, size)


def _get_batch_inputs_and_shardable_parameters(
    module: nn.Module,
    sharders: Sequence[PlannerSharder],
    batch_size: int,
    constraints: Mapping[str, ParameterConstraints] | None = None,
) -> tuple[list[float], set[nn.Module]]:
    """Ids per batch of each table's features, and the modules the sharders will shard.

    A module is sharded when a sharder's `module_type` is exactly its type; its children are
    then not visited. A table reads `pooling_factors` ids per sample for each of its features
    (one feature of pooling 1.0 without a constraint), at `batch_sizes` or `batch_size`.
    """
    by_type = {sharder_name(s.module_type): s for s in sharders}
    inputs: list[float] = []
    shardable: set[nn.Module] = set()

    def visit(mod: nn.Module) -> None:
        sharder = by_type.get(sharder_name(type(mod)))
        if sharder is None:
            for child in mod.children():
                visit(child)
            return
        shardable.add(mod)
        for name in sharder.shardable_parameters(mod):
            cons = constraints.get(name) if constraints else None
            given = cons.pooling_factors if cons else None
            sizes = list(cons.batch_sizes) if cons and cons.batch_sizes else None
            if not given or isinstance(given, DefaultPoolingFactors):
                pooling = [POOLING_FACTOR] * (len(sizes) if sizes else 1)
            else:
                pooling = list(given)
            sizes = sizes or [batch_size] * len(pooling)
            inputs.extend(p * b for p, b in zip(pooling, sizes, strict=True))

    visit(module)
    return inputs, shardable


def _subtract_everywhere(topology: Topology, storage: Storage) -> None:
    for device in topology.devices:
        device.storage -= storage


def _check_fraction(percentage: float) -> None:
    if not 0.0 <= percentage <= 1.0:
        raise ValueError(
            f"percentage must be in [0, 1] (the fraction of each rank's HBM to keep back), "
            f"got {percentage}"
        )


def _check_left(
    topology: Topology,
    reserved: Topology,
    percentage: float,
    dense: Storage,
    kjt: Storage,
    batch_size: int,
) -> None:
    """Raise PlannerError (INSUFFICIENT_STORAGE) when `reserved` leaves a rank nothing."""
    left = reserved.devices[0].storage if reserved.devices else None
    if left is not None and (left.hbm < 0 or left.ddr < 0):
        raise PlannerError(
            f"nothing is left per rank for embedding tables: "
            f"{storage_repr_in_gb(topology.devices[0].storage)} per rank, minus "
            f"{percentage:.0%} margin, dense {storage_repr_in_gb(dense)}"
            f" and input batches {storage_repr_in_gb(kjt)} leaves "
            f"{storage_repr_in_gb(left)}. Lower the percentage, pass dense_tensor_estimate "
            f"if the dense estimate is too high, reduce the batch size ({batch_size}), or "
            "use ranks with more memory",
            error_type=PlannerErrorType.INSUFFICIENT_STORAGE,
        )


class _MarginReservation:
    """What TorchRec's three reservations share: keep back a margin of every rank's HBM
    (`_margin`), size the KJT batches, and, where the policy counts the dense part of the model
    (`_dense_bytes` is not None), hold back the dense part and the KJT batches too."""

    def __init__(self, percentage: float) -> None:
        _check_fraction(percentage)
        self._percentage = percentage
        self._kjt_storage: Storage | None = None
        self._dense_storage: Storage | None = None
        self._last_reserved_topology: Topology | None = None

    def reserve(
        self,
        topology: Topology,
        batch_size: int,
        module: nn.Module,
        sharders: Sequence[PlannerSharder],
        constraints: Mapping[str, ParameterConstraints] | None = None,
    ) -> Topology:
        reserved = copy.deepcopy(topology)
        for device in reserved.devices:
            device.storage.hbm = self._margin(device.storage.hbm)
        inputs, shardable = _get_batch_inputs_and_shardable_parameters(
            module, sharders, batch_size, constraints
        )
        self._kjt_storage = _get_kjt_storage(topology, inputs, BIGINT_DTYPE, KJT_COPIES)
        dense = self._dense_bytes(module, shardable)
        if dense is not None:
            self._dense_storage = _on_device(topology, dense)
            _subtract_everywhere(reserved, self._dense_storage)
            _subtract_everywhere(reserved, self._kjt_storage)
            _check_left(
                topology,
                reserved,
                self._percentage,
                self._dense_storage,
                self._kjt_storage,
                batch_size,
            )
        self._last_reserved_topology = copy.deepcopy(reserved)
        return reserved

    def _margin(self, hbm: int) -> int:
        """What a rank's `hbm` bytes leave after the margin."""
        return int((1 - self._percentage) * hbm)

    def _dense_bytes(self, module: nn.Module, shardable: set[nn.Module]) -> int | None:
        """Bytes of `module`'s dense part (without its `shardable` modules) to hold back; None:
        the policy holds back neither it nor the KJT batches (it only records their size)."""
        return None

    @property
    def last_reserved_topology(self) -> Topology | None:
        """A copy of what the last `reserve` returned (None before the first)."""
        return copy.deepcopy(self._last_reserved_topology)


class FixedPercentageStorageReservation(_MarginReservation):
    """Keeps back `percentage` of every rank's HBM; records (does not reserve) the KJT size."""

    def describe(self) -> str:
        return f"{self._percentage:.0%} of HBM per device"


class FixedAbsoluteStorageReservation(FixedPercentageStorageReservation):
    """Keeps back `hbm_reserved_bytes` of every rank's HBM (floored at zero)."""

    def __init__(self, hbm_reserved_bytes: int) -> None:
        if hbm_reserved_bytes < 0:
            raise InvalidValueError(
                f"hbm_reserved_bytes must be >= 0, got {hbm_reserved_bytes} (reserve 0 or more)"
            )
        super().__init__(percentage=0.0)
        self._hbm_reserved_bytes = hbm_reserved_bytes

    @classmethod
    def from_gb(cls, hbm_reserved_gb: float) -> FixedAbsoluteStorageReservation:
        return cls(hbm_reserved_bytes=gb_to_bytes(hbm_reserved_gb))

    def describe(self) -> str:
        return f"{bytes_to_gb(self._hbm_reserved_bytes):.4g} GB per device of HBM"

    def _margin(self, hbm: int) -> int:
        return max(0, super()._margin(hbm) - self._hbm_reserved_bytes)


class HeuristicalStorageReservation(_MarginReservation):
    """Keeps back a margin, the dense part of the model and the KJT batches (module docstring).

    `dense_tensor_estimate` (bytes) replaces the dense estimate, e.g. when the model is on the
    meta device or sharded by FSDP. Raises `PlannerError` (INSUFFICIENT_STORAGE) when nothing
    is left for tables.
    """

    def __init__(
        self,
        percentage: float,
        parameter_multiplier: float = DENSE_PARAMETER_MULTIPLIER,
        dense_tensor_estimate: int | None = None,
    ) -> None:
        super().__init__(percentage)
        if parameter_multiplier < 0:
            raise ValueError(f"parameter_multiplier must be >= 0, got {parameter_multiplier}")
        self._parameter_multiplier = parameter_multiplier
        self._dense_tensor_estimate = dense_tensor_estimate

    def _dense_bytes(self, module: nn.Module, shardable: set[nn.Module]) -> int | None:
        if self._dense_tensor_estimate:
            return self._dense_tensor_estimate
        mult = self._parameter_multiplier
        return _get_module_size(module, mult) - sum(_get_module_size(m, mult) for m in shardable)

    def describe(self) -> str:
        return (
            f"{self._percentage:.0%} of HBM, dense {storage_repr_in_gb(self._dense_storage)}, "
            f"input batches {storage_repr_in_gb(self._kjt_storage)} per device"
        )
