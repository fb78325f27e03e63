"""Where one shard of a table lives: its offsets, its sizes and its placement `rank:R/DEVICE`."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

_PLACEMENT = re.compile(r"^rank:(\d+)/([a-z]+(?::\d+)?)$")


def placement(compute_device: str, rank: int, local_world_size: int) -> str:
    """The placement string of `rank`: `rank:3/cpu`, or `rank:11/cuda:3` with 8 GPUs a host."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    if compute_device in ("cuda", "mtia"):
        return f"rank:{rank}/{compute_device}:{rank % local_world_size}"
    return f"rank:{rank}/{compute_device}"


class ShardDims(tuple[int, ...]):
    """A shard's offsets or sizes: an immutable tuple of ints that also equals the list of the
    same ints, as TorchRec's `ShardMetadata` holds lists (`shard.shard_offsets == [0, 0]`)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple(self) == tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardMetadata:
    """One shard of a 2-d table: rows `[o0, o0 + s0)` and columns `[o1, o1 + s1)` on one rank."""

    shard_offsets: tuple[int, ...]
    shard_sizes: tuple[int, ...]
    placement: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shard_offsets", ShardDims(int(v) for v in self.shard_offsets))
        object.__setattr__(self, "shard_sizes", ShardDims(int(v) for v in self.shard_sizes))
        if len(self.shard_offsets) != len(self.shard_sizes):
            raise ValueError(
                f"shard_offsets {list(self.shard_offsets)} and shard_sizes "
                f"{list(self.shard_sizes)} must have the same length"
            )
        if any(v < 0 for v in (*self.shard_offsets, *self.shard_sizes)):
            raise ValueError(
                f"shard offsets and sizes must be >= 0, got offsets {list(self.shard_offsets)} "
                f"sizes {list(self.shard_sizes)}"
            )
        if not _PLACEMENT.match(self.placement):
            raise ValueError(
                f"placement {self.placement!r} is not of the form 'rank:R/DEVICE' "
                "(e.g. 'rank:0/cpu', 'rank:3/cuda:3')"
            )

    @property
    def rank(self) -> int:
        """The global rank that holds this shard."""
        match = _PLACEMENT.match(self.placement)
        assert match is not None  # validated in __post_init__
        return int(match.group(1))

    @property
    def device(self) -> str:
        """The device of the shard on its rank, e.g. `cpu` or `cuda:3`."""
        match = _PLACEMENT.match(self.placement)
        assert match is not None  # validated in __post_init__
        return match.group(2)

    def to_dict(self) -> dict[str, object]:
        return {
            "offsets": list(self.shard_offsets),
            "sizes": list(self.shard_sizes),
            "placement": self.placement,
        }

    @staticmethod
    def from_dict(data: dict[str, object]) -> ShardMetadata:
        offsets, sizes = data["offsets"], data["sizes"]
        if not isinstance(offsets, Sequence) or not isinstance(sizes, Sequence):
            raise ValueError(f"shard entry {data!r} needs list 'offsets' and 'sizes'")
        return ShardMetadata(
            shard_offsets=tuple(int(v) for v in offsets),
            shard_sizes=tuple(int(v) for v in sizes),
            placement=str(data["placement"]),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnumerableShardingSpec:
    """The list of shards of one table (TorchRec's name)."""

    shards: tuple[ShardMetadata, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", tuple(self.shards))
