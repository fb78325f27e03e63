"""Storage of managed-collision (raw-id) tables: the id map and policy metadata per row.

A table behind a managed-collision module (TorchRec's `ManagedCollisionEmbeddingBagCollection`
and `...EmbeddingCollection`, shardrec's or TorchRec's) holds, besides its rows and their
optimizer state, the module's per-slot state: for MCH the sorted raw ids, their rows and the
policy's metadata (8 bytes each); for HashZch the identities (8 bytes) and eviction metadata
(4 bytes). The planner reads it off the module's buffers: every buffer or parameter whose first
dimension is the table's row count is per-row state. Per shard the bytes scale with its rows.
"""

from __future__ import annotations

from torch import nn

__all__ = ["mc_bytes_per_row"]

# fixed-size buffers of every MC module (shard segments, iteration count): not per row
_NOT_PER_ROW = frozenset({"_output_segments_tensor", "_current_iter_tensor"})


def mc_bytes_per_row(module: nn.Module, table: str) -> int:
    """Bytes of managed-collision state per row of `table` in `module` (0 if none)."""
    collection = getattr(module, "_managed_collision_collection", None)
    modules = getattr(collection, "_managed_collision_modules", None)
    if not isinstance(modules, nn.ModuleDict) or table not in modules:
        return 0
    mc = modules[table]
    rows_of = getattr(mc, "output_size", None)
    if not callable(rows_of):
        return 0
    rows = int(rows_of())
    per_row = 0
    named = [*mc.named_buffers(recurse=False), *mc.named_parameters(recurse=False)]
    for name, tensor in named:
        if name in _NOT_PER_ROW:
            continue
        if tensor.dim() >= 1 and tensor.shape[0] == rows and rows > 0:
            per_row += tensor.element_size() * (tensor.numel() // rows)
    return per_row
