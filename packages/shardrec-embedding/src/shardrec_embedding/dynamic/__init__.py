"""Raw-id ("dynamic") embedding tables: any int64 id is mapped to one of a table's slots.

`DynamicTableConfig` declares it per table; `IdSlotMap` is the id -> slot hash map (native C
with a torch fallback giving the same slots); `DynamicTable` adds admission, eviction and
counters; `DynamicTables` remaps a collection's KJT. docs/dynamic.md.
"""

from shardrec_embedding.dynamic.config import (
    AdmissionPolicy,
    DynamicTableConfig,
    EvictionPolicy,
    UnknownIdPolicy,
)

__all__ = [
    "AdmissionPolicy",
    "DynamicTableConfig",
    "EvictionPolicy",
    "UnknownIdPolicy",
]
