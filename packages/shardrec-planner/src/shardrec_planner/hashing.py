"""Hashes of planner inputs that are the same in every process and on every machine.

A plan cache (TorchRec's `PlanLoader`) keys a stored plan by a hash of what the planner was
given: the topology, the batch size, the enumerator's search space, the storage reservation's
policy and reserved topology, and the constraints. Ranks and restarted jobs must agree on it,
so it never uses Python's `hash()` of a string (salted per process): values are first turned
into a canonical nested tuple of plain numbers and strings, whose `repr` is hashed with SHA-256.

Device capacities in a context hash are rounded to the nearest 100 GiB (TorchRec's
`HUNDRED_GB`, `round_to_nearest`): two machines of one type report a few MB more or less memory
(driver, OS), and that must not invalidate a cached plan; a genuinely different machine class
(256 vs 512 GiB of host memory) still changes the hash. `Topology._hash()` keeps exact values.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeAlias

from shardrec_planner.constants import HUNDRED_GB
from shardrec_planner.errors import InvalidValueError

if TYPE_CHECKING:
    from shardrec_planner.constraints import ParameterConstraints
    from shardrec_planner.planner_types import Shard, ShardingOption
    from shardrec_planner.topology import Topology

Canonical: TypeAlias = bool | int | float | str | tuple["Canonical", ...] | None


class SearchSpaceSource(Protocol):
    """An enumerator that kept its last search space (TorchRec's `EmbeddingEnumerator`)."""

    @property
    def last_stored_search_space(self) -> list[ShardingOption] | None: ...


class ReservedTopologySource(Protocol):
    """A storage reservation that kept the topology it last reserved from."""

    @property
    def last_reserved_topology(self) -> Topology | None: ...


def canonical(value: object) -> Canonical:
    """`value` as nested tuples of plain values, the same in every process.

    Enums become `"Class.NAME"` (a string enum its string), dataclasses `(class name, (field,
    value), ...)`, mappings are sorted by key, sequences become tuples; anything else is its
    `repr` (which must then not carry a memory address to be stable).
    """
    if isinstance(value, enum.Enum):  # before str / int: StrEnum and IntEnum members are both
        # a string enum hashes as its string: ShardingType.ROW_WISE == "row_wise" in Python too
        return (
            str(value.value) if isinstance(value, str) else f"{type(value).__name__}.{value.name}"
        )
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(
            (f.name, canonical(getattr(value, f.name))) for f in dataclasses.fields(value)
        )
        return (type(value).__name__, *fields)
    if isinstance(value, Mapping):
        items = sorted(((str(k), canonical(v)) for k, v in value.items()), key=lambda kv: kv[0])
        return tuple(items)
    if isinstance(value, list | tuple):
        return tuple(canonical(v) for v in value)
    return repr(value)


def hash_sha256_str(values: Iterable[object]) -> str:
    """The SHA-256 hex digest of the canonical form of `values`."""
    text = repr(canonical(list(values)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_sha256_to_int(values: Iterable[object]) -> int:
    """`hash_sha256_str(values)` as an integer."""
    return int(hash_sha256_str(values), 16)


def round_to_nearest(x: int, unit: int) -> int:
    """`x` rounded to the nearest multiple of `unit` (halves to even, as Python's `round`)."""
    if unit <= 0:
        raise ValueError(f"unit must be > 0, got {unit}")
    return round(x / unit) * unit


def topology_hash_components(
    topology: Topology, round_unit: int | None = HUNDRED_GB
) -> list[object]:
    """What identifies a topology for planning: sizes, every rank's storage (rounded to
    `round_unit` bytes, exact for None), the bandwidths and TorchRec's perf multipliers."""

    def r(x: int) -> int:
        return x if round_unit is None else round_to_nearest(x, round_unit)

    devices = [
        (d.rank, r(d.storage.hbm), r(d.storage.ddr), r(d.storage.ssd)) for d in topology.devices
    ]
    comms = topology.comms_bandwidths
    return [
        topology.world_size,
        topology.compute_device,
        devices,
        topology.local_world_size,
        topology.intra_group_size,
        topology.hbm_mem_bw,
        topology.ddr_mem_bw,
        topology.ssd_mem_bw,
        topology.hbm_to_ddr_mem_bw,
        comms.intra_host_bw,
        comms.inter_host_bw,
        topology.bwd_compute_multiplier,
        topology.weighted_feature_bwd_compute_multiplier,
        topology.uneven_sharding_perf_multiplier,
    ]


def _shard_components(shard: Shard) -> tuple[object, ...]:
    storage = shard.storage
    return (
        tuple(shard.size),
        tuple(shard.offset),
        shard.rank,
        None if storage is None else (storage.hbm, storage.ddr, storage.ssd),
    )


def planner_context_components(
    topology: Topology,
    batch_size: int,
    enumerator: SearchSpaceSource,
    storage_reservation: ReservedTopologySource,
    constraints: Mapping[str, ParameterConstraints] | None,
) -> list[object]:
    """The list `hash_planner_context_inputs` hashes (TorchRec's components, in its order).

    Raises `InvalidValueError` when the enumerator has not enumerated or the reservation has
    not reserved yet: the hash describes a planner that has seen the model.
    """
    space = getattr(enumerator, "last_stored_search_space", None)
    if space is None:
        raise InvalidValueError(
            f"cannot hash the planner context: {type(enumerator).__name__} has no stored search "
            "space; call enumerator.enumerate(module, sharders) first"
        )
    reserved = getattr(storage_reservation, "last_reserved_topology", None)
    if reserved is None:
        raise InvalidValueError(
            f"cannot hash the planner context: {type(storage_reservation).__name__} has no "
            "reserved topology; call storage_reservation.reserve(...) first"
        )
    options = [
        [
            option.fqn,
            option.sharding_type,
            option.compute_kernel,
            tuple(_shard_components(shard) for shard in option.shards),
            option.cache_params,
        ]
        for option in space
    ]
    return [
        hash_sha256_to_int(topology_hash_components(topology)),
        batch_size,
        options,
        type(storage_reservation).__name__,
        hash_sha256_to_int(topology_hash_components(reserved)),
        tuple((k, v.stable_hash()) for k, v in sorted(constraints.items()))
        if constraints
        else None,
    ]


def hash_planner_context_inputs(
    topology: Topology,
    batch_size: int,
    enumerator: SearchSpaceSource,
    storage_reservation: ReservedTopologySource,
    constraints: Mapping[str, ParameterConstraints] | None,
    hash_function: Callable[[list[object]], int] = hash_sha256_to_int,
) -> int:
    """The planner context's hash as an integer (TorchRec's function of the same name)."""
    return hash_function(
        planner_context_components(
            topology, batch_size, enumerator, storage_reservation, constraints
        )
    )


def hash_planner_context_inputs_str(
    topology: Topology,
    batch_size: int,
    enumerator: SearchSpaceSource,
    storage_reservation: ReservedTopologySource,
    constraints: Mapping[str, ParameterConstraints] | None,
    hash_function: Callable[[list[object]], str] = hash_sha256_str,
) -> str:
    """The planner context's hash as a hex string."""
    return hash_function(
        planner_context_components(
            topology, batch_size, enumerator, storage_reservation, constraints
        )
    )
