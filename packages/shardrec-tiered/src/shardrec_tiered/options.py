"""`TieredOptions`: how one table is tiered (store directory, cache size, replacement policy)."""

from __future__ import annotations

import dataclasses
import enum
import os

__all__ = ["CachePolicy", "TieredOptions", "default_store_dir"]


class CachePolicy(enum.StrEnum):
    """Which cached row a miss replaces: least recently or least frequently used (TorchRec's
    `CacheAlgorithm.LRU` / `LFU`)."""

    LRU = "lru"
    LFU = "lfu"


def default_store_dir(output_dir: str | None = None) -> str:
    """`<output_dir>/tier-store` (the run's output directory; default the working directory)."""
    return os.path.join(output_dir or os.getcwd(), "tier-store")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TieredOptions:
    """One table's tier.

    store_dir: directory of the table's store file (`KeyValueParams.ssd_storage_directory`);
        None: `default_store_dir()`.
    load_factor: cached fraction of the table's rows (`CacheParams.load_factor`), or
    cache_rows: the cached row count (wins over load_factor). At least one batch's distinct
        rows must fit, else the lookup raises naming both sizes.
    policy: LRU or LFU. io_threads: threads of the store's positioned I/O.
    mapped: map the store file into memory and copy rows instead of a system call per row
        (True), never (False), or while the process's mapped stores fit a quarter of the
        machine's memory (None, the default; `FlatFileStore`).
    """

    store_dir: str | None = None
    load_factor: float | None = None
    cache_rows: int | None = None
    policy: CachePolicy = CachePolicy.LRU
    io_threads: int = 4
    mapped: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", CachePolicy(self.policy))
        if self.load_factor is not None and not 0.0 < self.load_factor <= 1.0:
            raise ValueError(f"TieredOptions.load_factor must be in (0, 1], got {self.load_factor}")
        rows = self.cache_rows
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise ValueError(f"TieredOptions.cache_rows must be an int >= 1, got {rows!r}")
        if (
            isinstance(self.io_threads, bool)
            or not isinstance(self.io_threads, int)
            or self.io_threads < 1
        ):
            raise ValueError(
                f"TieredOptions.io_threads must be an int >= 1, got {self.io_threads!r}"
            )

        if self.mapped is not None and not isinstance(self.mapped, bool):
            raise ValueError(
                f"TieredOptions.mapped must be True, False or None, got {self.mapped!r}"
            )

    def slots_for(self, num_rows: int) -> int:
        """Cache rows of a table of `num_rows` rows (default load factor 0.2, TorchRec's)."""
        if self.cache_rows is not None:
            return min(self.cache_rows, num_rows)
        factor = 0.2 if self.load_factor is None else self.load_factor
        return max(1, min(num_rows, round(num_rows * factor)))

    def directory(self) -> str:
        return self.store_dir if self.store_dir is not None else default_store_dir()
