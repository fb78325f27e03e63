"""Tables larger than memory: rows and optimizer state in a store on disk, a row cache in memory.

- `TieredFusedEmbeddingBag`: the tiered twin of a fused batched lookup (lookup.py).
- `RowCache` (cache.py) over a `SlotMap` (slot_map.py), `FlatFileStore` (store.py) with its
  `StoreLayout` header (layout.py), `TieredOptions` (options.py).
- `RawIdTieredEmbeddingBag` (raw_ids.py): a raw-id table's rows in a key-value store
  (`KeyValueRows`: `shardrec_kvstore.RocksRowStore` on disk, `MemoryRows` in RAM) behind the
  same row cache, keyed through the dynamic tables' `IdSlotMap`.
"""

from shardrec_tiered.cache import CacheFullError, CacheTooSmallError, RowCache
from shardrec_tiered.layout import StoreLayout, StoreLayoutError
from shardrec_tiered.lookup import TieredFusedEmbeddingBag
from shardrec_tiered.options import CachePolicy, TieredOptions, default_store_dir
from shardrec_tiered.raw_ids import (
    KeyValueRows,
    MemoryRows,
    RawIdRows,
    RawIdTieredEmbeddingBag,
    initial_rows,
)
from shardrec_tiered.row_store import RowStore
from shardrec_tiered.slot_map import DenseSlotMap, SlotMap
from shardrec_tiered.store import FlatFileStore, StoreIOError, StoreSpaceError

__all__ = [
    "CacheFullError",
    "CachePolicy",
    "CacheTooSmallError",
    "DenseSlotMap",
    "FlatFileStore",
    "KeyValueRows",
    "MemoryRows",
    "RawIdRows",
    "RawIdTieredEmbeddingBag",
    "RowCache",
    "RowStore",
    "SlotMap",
    "StoreIOError",
    "StoreLayout",
    "StoreLayoutError",
    "StoreSpaceError",
    "TieredFusedEmbeddingBag",
    "TieredOptions",
    "default_store_dir",
    "initial_rows",
]
