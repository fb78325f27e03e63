"""How one table is sharded: its sharding type, compute kernel, ranks and shards."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shardrec_planner.cache_params import BoundsCheckMode, CacheAlgorithm, CacheParams
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType, executable_kernel
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata

KERNEL_SETTINGS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode")
"""The per-table kernel settings a ParameterSharding carries from the table's constraints."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParameterSharding:
    """The plan for one table.

    `ranks` lists the rank of each shard in shard order (a rank can appear twice, e.g. two column
    blocks on one rank); a list, as TorchRec's, copied on construction. `sharding_spec` is None for
    data_parallel: every rank holds the table. Plain strings are accepted for `sharding_type` and
    `compute_kernel`. `cache_params`, `enforce_hbm`, `stochastic_rounding` and
    `bounds_check_mode` are the table's kernel settings from its ParameterConstraints (TorchRec's
    fields; None when unset). Plans compare by value; a ParameterSharding is not hashable.
    """

    sharding_type: ShardingType
    compute_kernel: EmbeddingComputeKernel
    ranks: list[int]
    sharding_spec: EnumerableShardingSpec | None = None
    cache_params: CacheParams | None = None
    enforce_hbm: bool | None = None
    stochastic_rounding: bool | None = None
    bounds_check_mode: BoundsCheckMode | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sharding_type", ShardingType(self.sharding_type))
        kernel = executable_kernel(self.compute_kernel, "ParameterSharding")
        object.__setattr__(self, "compute_kernel", kernel)
        given: object = self.ranks
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError(f"ranks must be a list of ints, got {given!r}")
        object.__setattr__(self, "ranks", [int(r) for r in self.ranks])
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
        return {
            "sharding_type": self.sharding_type.value,
            "compute_kernel": self.compute_kernel.value,
            "ranks": list(self.ranks),
            "shards": None
            if self.sharding_spec is None
            else [s.to_dict() for s in self.sharding_spec.shards],
            **self._kernel_settings(),
        }

    def _kernel_settings(self) -> dict[str, object]:
        # The JSON form keeps the cache's algorithm, load factor and reserved memory (its
        # precision and stats objects are not carried) and the three flags, when set.
        out: dict[str, object] = {}
        c = self.cache_params
        if c is not None:
            out["cache_params"] = {
                "algorithm": None if c.algorithm is None else c.algorithm.value,
                "load_factor": c.load_factor,
                "reserved_memory": c.reserved_memory,
                "prefetch_pipeline": c.prefetch_pipeline,
            }
        for key in ("enforce_hbm", "stochastic_rounding"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.bounds_check_mode is not None:
            out["bounds_check_mode"] = self.bounds_check_mode.value
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
            cache_params=_cache_params(data.get("cache_params")),
            enforce_hbm=_flag(data, "enforce_hbm"),
            stochastic_rounding=_flag(data, "stochastic_rounding"),
            bounds_check_mode=None
            if data.get("bounds_check_mode") is None
            else BoundsCheckMode(data["bounds_check_mode"]),
        )


def _flag(data: dict[str, object], key: str) -> bool | None:
    value = data.get(key)
    return None if value is None else bool(value)


def _cache_params(data: object) -> CacheParams | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"'cache_params' must be an object or null, got {data!r}")
    algorithm = data.get("algorithm")
    return CacheParams(
        algorithm=None if algorithm is None else CacheAlgorithm(algorithm),
        load_factor=data.get("load_factor"),
        reserved_memory=data.get("reserved_memory"),
        prefetch_pipeline=data.get("prefetch_pipeline"),
    )
