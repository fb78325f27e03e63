"""How one table is sharded: its sharding type, compute kernel, ranks and shards."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType, executable_kernel
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParameterSharding:
    """The plan for one table.

    `ranks` lists the rank of each shard in shard order (a rank can appear twice, e.g. two column
    blocks on one rank). `sharding_spec` is None for data_parallel: every rank holds the table.
    Plain strings are accepted for `sharding_type` and `compute_kernel`.
    `ranks` is a list (TorchRec's type), checked and copied on construction; plans compare by
    value, and a ParameterSharding is not hashable.
    """

    sharding_type: ShardingType
    compute_kernel: EmbeddingComputeKernel
    ranks: list[int]
    sharding_spec: EnumerableShardingSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sharding_type", ShardingType(self.sharding_type))
        kernel = executable_kernel(self.compute_kernel, "ParameterSharding")
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
        return {
            "sharding_type": self.sharding_type.value,
            "compute_kernel": self.compute_kernel.value,
            "ranks": list(self.ranks),
            "shards": None
            if self.sharding_spec is None
            else [s.to_dict() for s in self.sharding_spec.shards],
        }

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
        )
