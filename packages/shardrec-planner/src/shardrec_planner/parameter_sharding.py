"""How one table is sharded: its sharding type, compute kernel, ranks and shards."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from shardrec_embedding import DataType
from shardrec_planner.cache_params import (
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
    MultiPassPrefetchConfig,
)
from shardrec_planner.enums import (
    EmbeddingComputeKernel,
    ShardingType,
    executable_kernel,
)
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParameterSharding:
    """The plan for one table.

    `ranks` lists the rank of each shard in shard order (a rank can appear twice, e.g. two column
    blocks on one rank). `sharding_spec` is None for data_parallel: every rank holds the table.
    Plain strings are accepted for `sharding_type` and `compute_kernel`.
    `ranks` is a list (TorchRec's type), checked and copied on construction; plans compare by
    value, and a ParameterSharding is not hashable.

    TorchRec's per-table kernel options ride along (from the table's `ParameterConstraints`):
    `cache_params`, `enforce_hbm`, `stochastic_rounding`, `bounds_check_mode`,
    `key_value_params`. What shardrec does with each, and which kernel runs for a UVM or
    key-value plan, is `kernel_choice.kernel_notes` (printed by `plan.report()`).
    """

    sharding_type: ShardingType
    compute_kernel: EmbeddingComputeKernel
    ranks: list[int]
    sharding_spec: EnumerableShardingSpec | None = None
    cache_params: CacheParams | None = None
    enforce_hbm: bool | None = None
    stochastic_rounding: bool | None = None
    bounds_check_mode: BoundsCheckMode | None = None
    key_value_params: KeyValueParams | None = None

    def __post_init__(self) -> None:
        for field, kind in _TYPED_OPTIONS:
            value = getattr(self, field)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{field} must be a {kind.__name__} or None, got {value!r}")
        object.__setattr__(self, "sharding_type", ShardingType(self.sharding_type))
        kernel = executable_kernel(
            self.compute_kernel, "ParameterSharding", sharding_type=self.sharding_type
        )
        object.__setattr__(self, "compute_kernel", kernel)
        given: object = self.ranks
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError(f"ranks must be a list of ints, got {given!r}")
        object.__setattr__(self, "ranks", [int(r) for r in given])
        if not self.ranks:
            raise ValueError(f"ranks must not be empty for a {self.sharding_type} table")
        if self.sharding_type is ShardingType.DATA_PARALLEL:
            if self.sharding_spec is not None:
                raise ValueError("sharding_spec must be None for data_parallel (no shards)")
            return
        if self.sharding_spec is None:
            raise ValueError(f"sharding_spec is required for {self.sharding_type}")
        spec_ranks = [s.rank for s in self.sharding_spec.shards]
        if spec_ranks != self.ranks:
            raise ValueError(
                f"ranks {list(self.ranks)} do not match the ranks of the shard placements "
                f"{list(spec_ranks)}"
            )

    @property
    def shards(self) -> tuple[ShardMetadata, ...]:
        """The shards in order; empty for data_parallel."""
        return () if self.sharding_spec is None else self.sharding_spec.shards

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "sharding_type": self.sharding_type.value,
            "compute_kernel": self.compute_kernel.value,
            "ranks": list(self.ranks),
            "shards": None
            if self.sharding_spec is None
            else [s.to_dict() for s in self.sharding_spec.shards],
        }
        out.update(_options_to_dict(self))
        return out

    @staticmethod
    def from_dict(data: dict[str, object]) -> ParameterSharding:
        shards = data.get("shards")
        ranks = data.get("ranks")
        if not isinstance(ranks, Sequence):
            raise ValueError(f"parameter sharding entry needs a list 'ranks', got {ranks!r}")
        spec = None
        if shards is not None:
            if not isinstance(shards, Sequence):
                raise ValueError(f"'shards' must be a list or null, got {shards!r}")
            spec = EnumerableShardingSpec(
                shards=tuple(ShardMetadata.from_dict(dict(s)) for s in shards)
            )
        return ParameterSharding(
            sharding_type=ShardingType(str(data["sharding_type"])),
            compute_kernel=EmbeddingComputeKernel(str(data["compute_kernel"])),
            ranks=[int(r) for r in ranks],
            sharding_spec=spec,
            **_options_from_dict(data),
        )


_TYPED_OPTIONS = (
    ("cache_params", CacheParams),
    ("enforce_hbm", bool),
    ("stochastic_rounding", bool),
    ("bounds_check_mode", BoundsCheckMode),
    ("key_value_params", KeyValueParams),
)


def _options_to_dict(ps: ParameterSharding) -> dict[str, object]:
    """The kernel options that are set, as JSON values (absent keys read back as None)."""
    out: dict[str, object] = {}
    if ps.cache_params is not None:
        out["cache_params"] = _cache_to_dict(ps.cache_params)
    for name in ("enforce_hbm", "stochastic_rounding"):
        if getattr(ps, name) is not None:
            out[name] = getattr(ps, name)
    if ps.bounds_check_mode is not None:
        out["bounds_check_mode"] = ps.bounds_check_mode.name
    if ps.key_value_params is not None:
        out["key_value_params"] = {
            k: v for k, v in dataclasses.asdict(ps.key_value_params).items() if v is not None
        }
    return out


def _cache_to_dict(cache: CacheParams) -> dict[str, object]:
    """`cache` as JSON values. `stats` (cache statistics, an input of TorchRec's perf estimate
    made before the plan exists) is left out; a `precision` or prefetch config of a type the
    JSON cannot hold raises `ValueError` naming it."""
    out: dict[str, object] = {}
    for name in ("load_factor", "reserved_memory", "prefetch_pipeline"):
        if getattr(cache, name) is not None:
            out[name] = getattr(cache, name)
    if cache.algorithm is not None:
        out["algorithm"] = cache.algorithm.name
    if cache.precision is not None:
        if not isinstance(cache.precision, DataType):
            raise ValueError(
                f"cache_params.precision {cache.precision!r} cannot be saved in a plan's JSON; "
                "use a DataType (e.g. DataType.FP16)"
            )
        out["precision"] = cache.precision.value
    mpp = cache.multipass_prefetch_config
    if mpp is not None:
        if not isinstance(mpp, MultiPassPrefetchConfig):
            raise ValueError(
                f"cache_params.multipass_prefetch_config {mpp!r} cannot be saved in a plan's "
                "JSON; use a MultiPassPrefetchConfig"
            )
        out["multipass_prefetch_config"] = dataclasses.asdict(mpp)
    return out


def _options_from_dict(data: Mapping[str, object]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cache = data.get("cache_params")
    if isinstance(cache, Mapping):
        fields = dict(cache)
        if "algorithm" in fields:
            fields["algorithm"] = CacheAlgorithm[str(fields["algorithm"])]
        if "precision" in fields:
            fields["precision"] = DataType(str(fields["precision"]))
        mpp = fields.get("multipass_prefetch_config")
        if isinstance(mpp, Mapping):
            fields["multipass_prefetch_config"] = MultiPassPrefetchConfig(**mpp)
        out["cache_params"] = CacheParams(**fields)
    for name in ("enforce_hbm", "stochastic_rounding"):
        if data.get(name) is not None:
            out[name] = data[name]
    if data.get("bounds_check_mode") is not None:
        out["bounds_check_mode"] = BoundsCheckMode[str(data["bounds_check_mode"])]
    kv = data.get("key_value_params")
    if isinstance(kv, Mapping):
        fields = dict(kv)
        if isinstance(fields.get("ps_hosts"), list):
            fields["ps_hosts"] = tuple(tuple(h) for h in fields["ps_hosts"])
        out["key_value_params"] = KeyValueParams(**fields)
    return out
