"""TorchRec's partitioners (`torchrec.distributed.planner.partitioners`): place a proposal.

`GreedyPerfPartitioner.partition(proposal, storage_constraint)` sets every shard's `rank` on a
copy of the topology (kept as `_topology`, with each rank's storage reduced and perf added):

1. "uniform" options (data_parallel, row_wise) put shard i on rank i.
2. The rest are grouped by `dependency` (else by table), largest first (summed storage, or
   summed perf with `SortBy.PERF`; smaller modules first with `balance_modules`).
3. "device" options (table_wise, column_wise): each shard goes to the least-loaded rank (perf
   total, then local rank, then rank) it fits on.
4. "host" options (table_row_wise, table_column_wise): the whole group goes on the least-loaded
   host that fits it: table_row_wise shard i on the host's i-th rank, table_column_wise
   shards as in 3 within the host.

A shard that fits nowhere raises `PlannerError` (PARTITION) naming the table. grid_shard
("multi_host") placement is not implemented: such a proposal raises `PlannerError` naming it.

`MemoryBalancedPartitioner` binary-searches the HBM per rank between the proposal's even
share and the greedy plan's, keeping the plan that uses least HBM while its `NoopPerfModel`
rating stays within `tolerance` of the unconstrained greedy plan.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import heapq
from collections.abc import Sequence

from shardrec_planner.enums import ShardingType
from shardrec_planner.errors import PlannerError, PlannerErrorType
from shardrec_planner.perf_models import NoopPerfModel
from shardrec_planner.planner_types import (
    DeviceHardware,
    PartitionByType,
    Perf,
    ShardingOption,
    Storage,
)
from shardrec_planner.planner_utils import reset_shard_rank
from shardrec_planner.topology import Topology

_MB = 1024 * 1024


class SortBy(enum.Enum):
    STORAGE = "storage"
    PERF = "perf"


@dataclasses.dataclass
class ShardingOptionGroup:
    """Options placed together (one table, or every table of one dependency)."""

    sharding_options: list[ShardingOption]
    storage_sum: Storage
    perf_sum: float
    param_count: int


def _estimates(option: ShardingOption, index: int) -> tuple[Storage, Perf]:
    shard = option.shards[index]
    if shard.storage is None or shard.perf is None:
        raise ValueError(
            f"table {option.name!r}: shard {index} has no storage or perf estimate; "
            "enumerate with estimators before partitioning"
        )
    return shard.storage, shard.perf


def _place(option: ShardingOption, index: int, device: DeviceHardware) -> None:
    storage, perf = _estimates(option, index)
    option.shards[index].rank = device.rank
    device.storage = device.storage - storage
    device.perf = device.perf + perf


def _group_and_sort_non_uniform_sharding_options(
    sharding_options: Sequence[ShardingOption],
    sort_by: SortBy = SortBy.STORAGE,
    balance_modules: bool = False,
) -> list[ShardingOptionGroup]:
    per_module: dict[str, int] = {}
    for option in sharding_options:
        per_module[option.path] = per_module.get(option.path, 0) + 1
    groups: dict[str, ShardingOptionGroup] = {}
    for option in sharding_options:
        if option.partition_by == PartitionByType.UNIFORM.value:
            continue
        key = option.dependency or option.fqn
        if key not in groups:
            groups[key] = ShardingOptionGroup(
                [option], option.total_storage, option.total_perf, -per_module[option.path]
            )
        else:
            group = groups[key]
            group.sharding_options.append(option)
            group.storage_sum += option.total_storage
            group.perf_sum += option.total_perf

    def key_of(group: ShardingOptionGroup) -> list[object]:
        main: object = group.storage_sum if sort_by is SortBy.STORAGE else group.perf_sum
        return [group.param_count, main] if balance_modules else [main]

    return sorted(groups.values(), key=key_of, reverse=True)


@dataclasses.dataclass
class OrderedDeviceHardware:
    """A rank in the least-loaded-first heap: perf total, then local rank, then rank."""

    device: DeviceHardware
    local_world_size: int

    def _key(self) -> tuple[float, int, int]:
        d = self.device
        return (d.perf.total, d.rank % self.local_world_size, d.rank)

    def __lt__(self, other: OrderedDeviceHardware) -> bool:
        return self._key() < other._key()


def _partition_error(message: str) -> PlannerError:
    return PlannerError(message, error_type=PlannerErrorType.PARTITION)


class GreedyPerfPartitioner:
    """Greedy placement by perf (module docstring)."""

    def __init__(self, sort_by: SortBy = SortBy.STORAGE, balance_modules: bool = False) -> None:
        self._sort_by = sort_by
        self._balance_modules = balance_modules
        self._topology: Topology | None = None

    def partition(
        self, proposal: list[ShardingOption], storage_constraint: Topology
    ) -> list[ShardingOption]:
        topology = copy.deepcopy(storage_constraint)
        local = topology.local_size
        devices = topology.devices
        hosts = [devices[i : i + local] for i in range(0, len(devices), local)]
        uniform = [o for o in proposal if o.partition_by == PartitionByType.UNIFORM.value]
        self._uniform_partition(uniform, devices)
        heap: list[OrderedDeviceHardware] | None = None
        groups = _group_and_sort_non_uniform_sharding_options(
            proposal, self._sort_by, self._balance_modules
        )
        for group in groups:
            first = group.sharding_options[0]
            if first.partition_by == PartitionByType.HOST.value:
                self._cohost_partition(group, hosts)
                heap = None
            elif first.partition_by == PartitionByType.DEVICE.value:
                if heap is None:
                    heap = self._establish_minheap(devices, local)
                for option in group.sharding_options:
                    self._device_partition(option, heap)
            else:
                raise _partition_error(
                    f"table {first.name!r}: partition_by {first.partition_by!r} "
                    f"({first.sharding_type}) is not placed by GreedyPerfPartitioner; "
                    "use a proposal without grid_shard"
                )
        self._topology = topology
        return proposal

    @classmethod
    def _establish_minheap(
        cls, devices: list[DeviceHardware], local_world_size: int
    ) -> list[OrderedDeviceHardware]:
        heap = [OrderedDeviceHardware(d, local_world_size) for d in devices]
        heapq.heapify(heap)
        return heap

    @classmethod
    def _device_partition(
        cls,
        sharding_option: ShardingOption,
        minheap_devices: list[OrderedDeviceHardware],
        bulk_heapify_threshold: float = 0.25,
    ) -> None:
        # Ranks skipped for lack of room go back one push at a time, or by one heapify when
        # more than `bulk_heapify_threshold` of the ranks were skipped.
        push_limit = len(minheap_devices) * bulk_heapify_threshold
        for index in range(len(sharding_option.shards)):
            storage, _ = _estimates(sharding_option, index)
            skipped = []
            while minheap_devices:
                ordered = minheap_devices[0]
                if storage.fits_in(ordered.device.storage):
                    _place(sharding_option, index, ordered.device)
                    heapq.heapreplace(minheap_devices, ordered)
                    break
                skipped.append(heapq.heappop(minheap_devices))
            else:
                largest = max((o.device.storage for o in skipped), default=None)
                raise _partition_error(
                    f"table {sharding_option.name!r}: shard {index} ({storage}) fits on no "
                    f"rank; the largest rank has {largest} left. Use more ranks, a smaller "
                    "table or a sharding type that splits it"
                )
            if len(skipped) <= push_limit:
                for ordered in skipped:
                    heapq.heappush(minheap_devices, ordered)
            else:
                minheap_devices.extend(skipped)
                heapq.heapify(minheap_devices)

    @classmethod
    def _cohost_partition(
        cls, sharding_option_group: ShardingOptionGroup, hosts: list[list[DeviceHardware]]
    ) -> None:
        for devices in sorted(hosts, key=lambda h: sum(d.perf.total for d in h)):
            trial = copy.deepcopy(devices)
            room = Storage(hbm=0, ddr=0)
            for d in trial:
                room += d.storage
            if not sharding_option_group.storage_sum.fits_in(room):
                continue
            try:
                heap = None
                for option in sharding_option_group.sharding_options:
                    if option.sharding_type == ShardingType.TABLE_ROW_WISE.value:
                        cls._uniform_partition([option], trial)
                        heap = None
                    elif option.sharding_type == ShardingType.TABLE_COLUMN_WISE.value:
                        heap = heap or cls._establish_minheap(trial, len(trial))
                        cls._device_partition(option, heap)
                    else:
                        raise _partition_error(
                            f"table {option.name!r}: {option.sharding_type} is not a "
                            "host-level sharding type"
                        )
            except PlannerError:
                continue
            trial.sort(key=lambda d: d.rank)
            for device, placed in zip(devices, trial, strict=True):
                device.storage, device.perf = placed.storage, placed.perf
            return
        names = [o.name for o in sharding_option_group.sharding_options]
        raise _partition_error(
            f"tables {names}: no host has room for them ({sharding_option_group.storage_sum}); "
            "use more or larger hosts, or a sharding type that spreads them"
        )

    @classmethod
    def _uniform_partition(
        cls, sharding_options: Sequence[ShardingOption], devices: list[DeviceHardware]
    ) -> None:
        for option in sharding_options:
            if option.num_shards != len(devices):
                raise _partition_error(
                    f"table {option.name!r}: a uniform partition needs one shard per rank, got "
                    f"{option.num_shards} shards for {len(devices)} ranks"
                )
            for i, device in enumerate(devices):
                storage, _ = _estimates(option, i)
                if not storage.fits_in(device.storage):
                    raise _partition_error(
                        f"table {option.name!r}: shard {i} ({storage}) does not fit on rank "
                        f"{device.rank} ({device.storage} left)"
                    )
                _place(option, i, device)


def set_hbm_per_device(storage_constraint: Topology, hbm_per_device: int) -> None:
    """Give every rank of `storage_constraint` exactly `hbm_per_device` bytes of HBM."""
    for device in storage_constraint.devices:
        device.storage.hbm = hbm_per_device


class MemoryBalancedPartitioner:
    """The greedy plan that uses least HBM per rank within `tolerance` of its perf (docstring)."""

    def __init__(
        self, max_search_count: int = 10, tolerance: float = 0.02, balance_modules: bool = False
    ) -> None:
        if max_search_count < 0:
            raise ValueError(f"max_search_count must be >= 0, got {max_search_count}")
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        self._max_search_count = max_search_count
        self._tolerance = tolerance
        self._balance_modules = balance_modules

    def partition(
        self, proposal: list[ShardingOption], storage_constraint: Topology
    ) -> list[ShardingOption]:
        model = NoopPerfModel(storage_constraint)
        greedy = GreedyPerfPartitioner(sort_by=SortBy.PERF, balance_modules=self._balance_modules)
        topology = copy.deepcopy(storage_constraint)
        best = copy.deepcopy(greedy.partition(proposal, topology))
        reference = model.rate(best)
        high = topology.devices[0].storage.hbm
        need = sum(s.storage.hbm for o in proposal for s in o.shards if s.storage is not None)
        low = need // topology.world_size
        for _ in range(self._max_search_count):
            if low + 10 * _MB >= high:
                break
            reset_shard_rank(proposal)
            mid = (low + high) // 2
            set_hbm_per_device(topology, mid)
            try:
                plan = greedy.partition(proposal, topology)
            except PlannerError:
                low = mid
                continue
            if model.rate(plan) > reference * (1 + self._tolerance):
                low = mid
            else:
                best, high = copy.deepcopy(plan), mid
        return best
