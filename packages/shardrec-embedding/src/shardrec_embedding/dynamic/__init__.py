"""Raw-id ("dynamic") embedding tables: any int64 id is mapped to one of a table's slots.

`DynamicTableConfig` declares it per table (`EmbeddingBagConfig(..., dynamic=...)`);
`IdSlotMap` is the id -> slot hash map (native C, with a torch fallback giving the same
slots); `DynamicTable` adds admission, eviction and counters; `DynamicTables` remaps a
collection's KJT around its lookup; `dynamic_table_stats` reads every table's counters from a
model. docs/dynamic.md, docs/design/dynamic-id-map.md.
"""

from shardrec_embedding.dynamic.collection import DynamicTables, dynamic_table_stats
from shardrec_embedding.dynamic.config import (
    AdmissionPolicy,
    DynamicTableConfig,
    EvictionPolicy,
    UnknownIdPolicy,
)
from shardrec_embedding.dynamic.hashing import mix64
from shardrec_embedding.dynamic.id_map import IdMapBackend, IdSlotMap, idmap_native_available
from shardrec_embedding.dynamic.table import DynamicTable, ResetHook

__all__ = [
    "AdmissionPolicy",
    "DynamicTable",
    "DynamicTableConfig",
    "DynamicTables",
    "EvictionPolicy",
    "IdMapBackend",
    "IdSlotMap",
    "ResetHook",
    "UnknownIdPolicy",
    "dynamic_table_stats",
    "idmap_native_available",
    "mix64",
]
