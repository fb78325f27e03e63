"""Tables larger than memory: rows and optimizer state in a store on disk, a row cache in memory.

- `TieredFusedEmbeddingBag`: the tiered twin of a fused batched lookup (lookup.py), its
  learning-rate view `TieredFusedOptimizer` (optimizer.py).
- `RowCache` (cache.py) over a `SlotMap` (slot_map.py), `FlatFileStore` (store.py) with its
  `StoreLayout` header (layout.py), `TieredOptions` (options.py).
"""

from shardrec_tiered.cache import CacheFullError, CacheTooSmallError, RowCache
from shardrec_tiered.layout import StoreLayout, StoreLayoutError
from shardrec_tiered.lookup import TieredFusedEmbeddingBag
from shardrec_tiered.optimizer import TieredFusedOptimizer
from shardrec_tiered.options import CachePolicy, TieredOptions, default_store_dir
from shardrec_tiered.slot_map import DenseSlotMap, SlotMap
from shardrec_tiered.store import FlatFileStore, StoreSpaceError

__all__ = [
    "CacheFullError",
    "CachePolicy",
    "CacheTooSmallError",
    "DenseSlotMap",
    "FlatFileStore",
    "RowCache",
    "SlotMap",
    "StoreLayout",
    "StoreLayoutError",
    "StoreSpaceError",
    "TieredFusedEmbeddingBag",
    "TieredFusedOptimizer",
    "TieredOptions",
    "default_store_dir",
]
