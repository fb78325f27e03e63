"""What a `Topology` is built from besides its scalars: per-rank capacities and a comms model.

TorchRec's names (`torchrec.distributed.planner.types`): `CustomTopologyData` gives each rank its
own HBM / DDR / SSD capacity (a cluster of unequal machines); a `GeneralizedCommsBandwidth`
answers "how fast does a collective of this kind among these ranks move bytes", in bytes per
millisecond as TorchRec's perf model counts; `BasicCommsBandwidths` is the two-number model
(one rate inside a host, one across hosts) every Topology has unless given another.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from shardrec_planner.constants import CROSS_NODE_BANDWIDTH, INTRA_NODE_BANDWIDTH
from shardrec_planner.errors import InvalidValueError


class CustomTopologyData:
    """Per-rank capacities in bytes: `data` maps `"hbm_cap"`, `"ddr_cap"` or `"ssd_cap"` to one
    value per rank (`world_size` of them). A `Topology` given it builds each rank's storage from
    these lists instead of its scalar caps.

    Bad keys, list lengths or negative values raise `InvalidValueError` (a `ValueError` that is
    also the `AssertionError` TorchRec raises).
    """

    supported_fields = ("ddr_cap", "hbm_cap", "ssd_cap")

    def __init__(self, data: Mapping[str, Sequence[int]], world_size: int) -> None:
        unknown = [key for key in data if key not in self.supported_fields]
        if unknown:
            raise InvalidValueError(
                f"CustomTopologyData keys {unknown} are not supported; use any of "
                f"{list(self.supported_fields)}"
            )
        for key, values in data.items():
            if len(values) != world_size:
                raise InvalidValueError(
                    f"CustomTopologyData {key!r} has {len(values)} values for world_size "
                    f"{world_size}; give one value per rank"
                )
            if any(int(v) < 0 for v in values):
                raise InvalidValueError(
                    f"CustomTopologyData {key!r} must be >= 0 bytes per rank, got {list(values)}"
                )
        self._data = {key: [int(v) for v in values] for key, values in data.items()}
        self._world_size = world_size

    def get_data(self, key: str) -> list[int]:
        """The per-rank values of `key` (raises `InvalidValueError` for a key not given)."""
        if key not in self._data:
            raise InvalidValueError(
                f"CustomTopologyData has no {key!r}; it has {sorted(self._data)}"
            )
        return list(self._data[key])

    def has_data(self, key: str) -> bool:
        return key in self._data

    @property
    def world_size(self) -> int:
        return self._world_size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CustomTopologyData):
            return NotImplemented
        return self._world_size == other._world_size and self._data == other._data

    def __hash__(self) -> int:
        return hash((self._world_size, tuple(sorted((k, tuple(v)) for k, v in self._data.items()))))

    def __repr__(self) -> str:
        data = dict(sorted(self._data.items()))
        return f"CustomTopologyData(data={data}, world_size={self._world_size})"


class CollectiveType(enum.Enum):
    """The collectives a comms model is asked about."""

    ALL_TO_ALL = "all_to_all"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_REDUCE = "all_reduce"


@runtime_checkable
class GeneralizedCommsBandwidth(Protocol):
    """A comms model: bytes/ms per rank of a collective among `world_size` ranks spread evenly
    over hosts of `local_world_size`, plus the two plain rates older callers read.

    A Protocol: TorchRec users subclass it, and any object with these members fits.
    """

    def get_bw(
        self, local_world_size: int, world_size: int, collective_type: CollectiveType
    ) -> float: ...

    @property
    def intra_host_bw(self) -> float: ...

    @property
    def inter_host_bw(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class BasicCommsBandwidths:
    """The two-rate comms model (bytes/ms): `intra_host_bw` among ranks of one host,
    `inter_host_bw` across hosts. An all-reduce counts one NIC per rank, so it runs at
    `inter_host_bw * local_world_size` (TorchRec's rule); other collectives run at the intra-host
    rate when every rank is on one host, else at the cross-host rate. Immutable, equal and
    hashable by its two rates.
    """

    inter_host_bw: float = CROSS_NODE_BANDWIDTH
    intra_host_bw: float = INTRA_NODE_BANDWIDTH
    name: ClassVar[str] = "BasicCommsBandwidths"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(
                    f"BasicCommsBandwidths {field.name} must be > 0 bytes/ms, got {value!r}"
                )
            object.__setattr__(self, field.name, float(value))

    def get_bw(
        self, local_world_size: int, world_size: int, collective_type: CollectiveType
    ) -> float:
        if collective_type is CollectiveType.ALL_REDUCE:
            return self.inter_host_bw * local_world_size
        return self.intra_host_bw if world_size <= local_world_size else self.inter_host_bw

    def __str__(self) -> str:
        rates = f"inter_host_bw={self.inter_host_bw}, intra_host_bw={self.intra_host_bw}"
        return f"{self.name}: {rates}"

    __repr__ = __str__
