"""TorchRec's planner value types: Perf, Storage, DeviceHardware, Shard, ShardingOption.

These are the objects TorchRec's planner parts pass to each other (an enumerator makes
ShardingOptions, estimators fill each Shard's `perf` and `storage`, a partitioner sets each Shard's
`rank`). Unlike our configs they are mutable on purpose: TorchRec's parts and its users' custom
parts assign to these fields, and a TorchRec configuration must run unchanged
(docs/design/planner-torchrec-parts.md).

Units follow TorchRec: storage in bytes, perf in milliseconds.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import hashlib
from typing import TYPE_CHECKING

import torch
from torch import nn

from shardrec_embedding import EmbeddingBagCollection, EmbeddingCollection

if TYPE_CHECKING:
    from shardrec_planner.cache_params import BoundsCheckMode, CacheParams, KeyValueParams


@dataclasses.dataclass(eq=True)
class Perf:
    """The estimated time (ms) one shard costs a training step, by phase."""

    fwd_compute: float
    fwd_comms: float
    bwd_compute: float
    bwd_comms: float
    input_dist_comms: float = 0.0
    prefetch_compute: float = 0.0

    @property
    def total(self) -> float:
        """All phases summed; prefetch counts as blocking (TorchRec's simplification)."""
        return (
            self.fwd_compute
            + self.bwd_compute
            + self.fwd_comms
            + self.bwd_comms
            + self.prefetch_compute
        )

    def __add__(self, other: Perf) -> Perf:
        return Perf(
            fwd_compute=self.fwd_compute + other.fwd_compute,
            fwd_comms=self.fwd_comms + other.fwd_comms,
            bwd_compute=self.bwd_compute + other.bwd_compute,
            bwd_comms=self.bwd_comms + other.bwd_comms,
            input_dist_comms=self.input_dist_comms + other.input_dist_comms,
            prefetch_compute=self.prefetch_compute + other.prefetch_compute,
        )

    def __hash__(self) -> int:
        return hash(dataclasses.astuple(self))


@dataclasses.dataclass(eq=True, order=True)
class Storage:
    """Bytes of device memory (`hbm`), host memory (`ddr`) and disk (`ssd`)."""

    hbm: int
    ddr: int
    ssd: int = 0

    def __add__(self, other: Storage) -> Storage:
        return Storage(hbm=self.hbm + other.hbm, ddr=self.ddr + other.ddr, ssd=self.ssd + other.ssd)

    def __sub__(self, other: Storage) -> Storage:
        return Storage(hbm=self.hbm - other.hbm, ddr=self.ddr - other.ddr, ssd=self.ssd - other.ssd)

    def __hash__(self) -> int:
        return hash((self.hbm, self.ddr, self.ssd))

    def fits_in(self, other: Storage) -> bool:
        """Whether every tier of `self` is at most the same tier of `other`."""
        return self.hbm <= other.hbm and self.ddr <= other.ddr and self.ssd <= other.ssd


@dataclasses.dataclass(eq=True)
class DeviceHardware:
    """One rank of a topology: its remaining storage and the perf already placed on it."""

    rank: int
    storage: Storage
    perf: Perf

    def __hash__(self) -> int:
        return hash((self.rank, self.storage, self.perf))


@dataclasses.dataclass
class Shard:
    """One block of a table: `size` and `offset` ([rows, cols]), its estimates and its rank."""

    size: list[int]
    offset: list[int]
    storage: Storage | None = None
    perf: Perf | None = None
    rank: int | None = None

    def __hash__(self) -> int:
        return hash((tuple(self.size), tuple(self.offset), self.storage, self.perf, self.rank))

    def __str__(self) -> str:
        return (
            f"Shard size: {tuple(self.size)}, offset: {tuple(self.offset)}, "
            f"storage: {self.storage}, perf: {self.perf}, rank: {self.rank}"
        )


def _module_pooled(module: nn.Module, table_name: str) -> bool:
    """Whether `table_name` in `module` is pooled (a bag) rather than a sequence embedding."""
    if isinstance(module, EmbeddingCollection):
        return False
    for sub in module.modules():
        if isinstance(sub, EmbeddingCollection) and any(
            table_name in name for name, _ in sub.named_parameters()
        ):
            return False
    return True


class ShardingOption:
    """One way to shard one table: a sharding type, a compute kernel and its shards.

    `module` is `(fqn of the sharded module, the module)`; `input_lengths` the pooling factor of
    each feature that reads the table. The enumerator makes several per table; a plan keeps one.
    """

    def __init__(
        self,
        name: str,
        tensor: torch.Tensor,
        module: tuple[str, nn.Module],
        input_lengths: list[float],
        batch_size: int,
        sharding_type: str,
        partition_by: str,
        compute_kernel: str,
        shards: list[Shard],
        cache_params: CacheParams | None = None,
        enforce_hbm: bool | None = None,
        stochastic_rounding: bool | None = None,
        bounds_check_mode: BoundsCheckMode | None = None,
        dependency: str | None = None,
        is_pooled: bool | None = None,
        feature_names: list[str] | None = None,
        output_dtype: object | None = None,
        key_value_params: KeyValueParams | None = None,
        num_poolings: list[float] | None = None,
    ) -> None:
        self.name = name
        self._tensor = tensor
        self._module = module
        self.input_lengths = input_lengths
        self.batch_size = batch_size
        self.sharding_type = sharding_type
        self.partition_by = partition_by
        self.compute_kernel = compute_kernel
        self.shards = shards
        self.cache_params = cache_params
        self.enforce_hbm = enforce_hbm
        self.stochastic_rounding = stochastic_rounding
        self.bounds_check_mode = bounds_check_mode
        self.dependency = dependency
        self._is_pooled = is_pooled if is_pooled is not None else _module_pooled(module[1], name)
        self.feature_names = feature_names
        self.output_dtype = output_dtype
        self.key_value_params = key_value_params
        self.num_poolings = num_poolings
        child = module[1]
        self.is_weighted: bool | None = (
            child.is_weighted() if isinstance(child, EmbeddingBagCollection) else None
        )

    @property
    def tensor(self) -> torch.Tensor:
        return self._tensor

    @property
    def module(self) -> tuple[str, nn.Module]:
        return self._module

    @property
    def fqn(self) -> str:
        return f"{self.module[0]}.{self.name}"

    @property
    def path(self) -> str:
        return self.module[0]

    @property
    def module_type_key(self) -> str:
        """The key of this table's sharder in a sharder map (`planner_utils.sharder_name` of the
        module's type)."""
        t = type(self.module[1])
        return f"{t.__module__}.{t.__name__}"

    @property
    def cache_load_factor(self) -> float | None:
        return None if self.cache_params is None else self.cache_params.load_factor

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def num_inputs(self) -> int:
        return len(self.input_lengths)

    @property
    def is_pooled(self) -> bool:
        return self._is_pooled

    @staticmethod
    def module_pooled(module: nn.Module, sharding_option_name: str) -> bool:
        """Whether the table is pooled (EmbeddingBag-like) rather than sequence (Embedding)."""
        return _module_pooled(module, sharding_option_name)

    @property
    def total_storage(self) -> Storage:
        """The storage of all shards; every shard must have been estimated."""
        total = Storage(hbm=0, ddr=0, ssd=0)
        for shard in self.shards:
            if shard.storage is None:
                raise ValueError(
                    f"table {self.name!r}: a shard has no storage estimate; run a storage "
                    "estimator on the sharding option first"
                )
            total += shard.storage
        return total

    @property
    def total_perf(self) -> float:
        """The perf total of all shards; every shard must have been estimated."""
        total = 0.0
        for shard in self.shards:
            if shard.perf is None:
                raise ValueError(
                    f"table {self.name!r}: a shard has no perf estimate; run a perf estimator "
                    "on the sharding option first"
                )
            total += shard.perf.total
        return total

    def get_shards_assignment(self) -> list[int | None]:
        return [shard.rank for shard in self.shards]

    def __hash__(self) -> int:
        return hash(
            (
                self.fqn,
                self.sharding_type,
                self.compute_kernel,
                tuple(self.shards),
                self.cache_params,
            )
        )

    def storage_hash(self) -> int:
        """A hash stable across processes of what identifies the option before planning."""
        text = (
            f"{self.fqn}|{self.sharding_type}|{self.compute_kernel}|"
            f"{self.cache_load_factor}|{self.num_shards}"
        )
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big")

    def __deepcopy__(self, memo: dict[int, object]) -> ShardingOption:
        # The tensor and the module are shared, never copied: a plan refers to the user's model.
        result = ShardingOption.__new__(ShardingOption)
        for key, value in self.__dict__.items():
            shared = key in ("_tensor", "_module")
            setattr(result, key, value if shared else copy.deepcopy(value, memo))
        return result

    def __str__(self) -> str:
        lines = [
            f"name: {self.name}",
            f"sharding type: {self.sharding_type}",
            f"compute kernel: {self.compute_kernel}",
            f"num shards: {len(self.shards)}",
        ]
        lines += [f"\t{shard}" for shard in self.shards]
        return "\n".join(lines)


class PartitionByType(enum.Enum):
    """How a partitioner places an option's shards: on one device each, on one host, or all."""

    DEVICE = "device"
    HOST = "host"
    UNIFORM = "uniform"
    MULTI_HOST = "multi_host"
