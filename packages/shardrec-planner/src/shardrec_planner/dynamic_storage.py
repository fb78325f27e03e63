"""What a dynamic (raw-id) table costs besides its rows: the id map, policy metadata, lookup.

A table declared with `dynamic=DynamicTableConfig(...)` (docs/dynamic.md) keeps, per slot, the
raw id (8 bytes), an occupied flag (1), last-seen step (8), sighting count (8) and a free-slot
stack entry (8), for LRU / LFU eviction a one-byte recent-step stamp (`dynamic/stamps.py`),
plus its share of the id map (`num_buckets` x 16 bytes) and, for THRESHOLD admission, of the
count-min sketch (2 x `sketch_cells` x 8 bytes). All of it lives in host
memory, whatever the rows' device. Every id it receives costs an id-map probe: one random
host-memory access (`MAP_PROBE_BYTES` at the host bandwidth) before the lookup.

Memory of a shard = its slots x (row + optimizer state + `dynamic_bytes_per_row`); the
replicated maps of column_wise / data_parallel tables hold every slot on each rank that has a
block (their shards span all rows, so the formula already counts them).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "MAP_PROBE_BYTES",
    "PER_SLOT_BYTES",
    "STAMP_BYTES",
    "dynamic_bytes_per_row",
    "module_dynamic_bytes_per_row",
]

PER_SLOT_BYTES = 8 + 1 + 8 + 8 + 8
"""slot_ids, occupied, last_seen, counts, free_slots."""

STAMP_BYTES = 1
"""The recent-step stamp per slot of an LRU / LFU table (the find pass writes it)."""

MAP_PROBE_BYTES = 64
"""One cache line of the id map per id looked up."""


def dynamic_bytes_per_row(configs: Sequence[object], table: str) -> float:
    """Host bytes of id map and policy metadata per slot of `table` (0: not dynamic)."""
    cfg = next((c for c in configs if getattr(c, "name", None) == table), None)
    dyn = getattr(cfg, "dynamic", None)
    rows = getattr(cfg, "num_embeddings", 0)
    if dyn is None or not isinstance(rows, int) or rows < 1:
        return 0.0
    total = PER_SLOT_BYTES * rows + 16 * int(dyn.num_buckets(rows))
    if str(getattr(dyn.eviction, "value", dyn.eviction)) in ("LRU", "LFU"):
        total += STAMP_BYTES * rows
    if str(getattr(dyn.admission, "value", dyn.admission)) == "THRESHOLD":
        total += 2 * 8 * int(dyn.sketch_cells(rows))
    return total / rows


def module_dynamic_bytes_per_row(module: object, table: str) -> float:
    """`dynamic_bytes_per_row` of `table` read off a collection's table configs."""
    for attr in ("embedding_bag_configs", "embedding_configs"):
        getter = getattr(module, attr, None)
        if callable(getter):
            return dynamic_bytes_per_row(list(getter()), table)
    return 0.0
