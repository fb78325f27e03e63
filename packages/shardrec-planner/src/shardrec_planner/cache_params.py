"""Per-table kernel options a plan carries: cache, key-value store and bounds-check settings.

TorchRec's names (`torchrec.distributed.types.CacheParams`, `CacheAlgorithm`, `KeyValueParams`,
`BoundsCheckMode`). They travel from `ParameterConstraints` through the planner's
`ShardingOption` to the sharder. On CPU there is no device cache: a table planned with a UVM or
key-value kernel is looked up by the plain fused kernel, and the plan report says so.
"""

from __future__ import annotations

import dataclasses
import enum


class CacheAlgorithm(enum.Enum):
    """Which rows a device cache of a UVM table evicts first."""

    LRU = 0
    LFU = 1


class BoundsCheckMode(enum.Enum):
    """What a lookup does with an id outside the table (fbgemm's numbering)."""

    FATAL = 0
    WARNING = 1
    IGNORE = 2
    NONE = 3


@dataclasses.dataclass(kw_only=True)
class CacheParams:
    """The device cache of a `fused_uvm_caching` table.

    `load_factor` is the fraction of the table's rows the cache holds (0..1); `reserved_memory`
    the bytes (GB in TorchRec's sharders) set aside for it; `precision` the cache's data type;
    `prefetch_pipeline` whether a pipeline fills the cache one batch ahead. Mutable and hashable
    by value as TorchRec's (its proposers and tests assign fields); an assigned value is checked
    as at construction.
    """

    algorithm: CacheAlgorithm | None = None
    load_factor: float | None = None
    reserved_memory: float | None = None
    precision: object | None = None
    prefetch_pipeline: bool | None = None
    stats: object | None = None
    multipass_prefetch_config: object | None = None

    def __setattr__(self, name: str, value: object) -> None:
        _check_cache_field(name, value)  # a bad value is refused before it is stored
        object.__setattr__(self, name, value)

    def __hash__(self) -> int:
        # every field but `stats` (an arbitrary statistics object), as TorchRec
        return hash(
            tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "stats")
        )


def _check_cache_field(name: str, value: object) -> None:
    if name == "load_factor" and value is not None and not 0.0 <= value <= 1.0:  # type: ignore[operator]
        raise ValueError(
            f"CacheParams.load_factor must be in [0, 1] (the cached fraction of rows), got {value}"
        )
    if name == "reserved_memory" and value is not None and value < 0:  # type: ignore[operator]
        raise ValueError(f"CacheParams.reserved_memory must be >= 0, got {value}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyValueParams:
    """Settings of a `key_value` table (rows in an SSD or parameter-server store)."""

    ssd_storage_directory: str | None = None
    ssd_rocksdb_write_buffer_size: int | None = None
    ssd_rocksdb_shards: int | None = None
    gather_ssd_cache_stats: bool | None = None
    l2_cache_size: int | None = None
    max_l1_cache_size: int | None = None
    """MB: the most a key-value / virtual table's device cache takes per shard; the storage
    estimate counts the smaller of it and the table's rows at the cache load factor."""
    ps_hosts: tuple[tuple[str, int], ...] | None = None
    ps_client_thread_num: int | None = None
    ps_max_key_per_request: int | None = None
    ps_max_local_index_length: int | None = None
    enable_async_update: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiPassPrefetchConfig:
    """TorchRec's multi-pass cache prefetch: the prefetch of one batch runs in `num_passes`
    passes (items of at least `min_splitted_item_size` are split), so fewer prefetched rows are
    resident at once; the planner's storage estimate of a cached table reads `num_passes`."""

    num_passes: int = 12
    min_splitted_item_size: int = 1 << 18

    def __post_init__(self) -> None:
        for name in ("num_passes", "min_splitted_item_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MultiPassPrefetchConfig.{name} must be an int >= 1, got {value!r}"
                )
