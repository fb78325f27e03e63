"""A raw-id tier's table moved to the same table held in memory, and back, at module level.

The in-memory twin of a `RawIdTieredEmbeddingBag` is a dynamic table of the same name in a
`FusedEmbeddingBagCollection` (rows and fused optimizer state per slot; a plain
`EmbeddingBagCollection` has no optimizer state: it moves as zeros). Sharded models move
through `shardrec_dmp.save` / `load` instead (shardrec_dmp/checkpoint_interchange.py).

- `load_from_dynamic(tier, collection)`: the tier's store is replaced by every id the
  collection's table holds, its row and optimizer state (`join_rows`); its cache is emptied.
  Ids never admitted are absent: they read their initial row.
- `load_into_dynamic(tier, collection)`: the collection's table is replaced by every id the
  tier's store holds, packed into slots `0..n-1` (ids in increasing order), with last_seen 0
  and counts 1 (the tier keeps no policy metadata); the other slots are reset. More ids than
  the table's capacity: a `ValueError` naming the table, ids, capacity and the fix, or with
  `evict_to_fit` the largest ids are kept (every id ties).

Another embedding_dim or optimizer state is refused (ValueError naming both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from shardrec_tiered.raw_checkpoint import empty, join_rows, split_rows, store_ids
from shardrec_tiered.raw_ids import RawIdRows, RawIdTieredEmbeddingBag

__all__ = ["load_from_dynamic", "load_into_dynamic"]


def _parts(tier: RawIdTieredEmbeddingBag, collection: nn.Module) -> tuple[str, Any, Tensor]:
    """`(name, the collection's dynamic table, its weight)`, checked against the tier."""
    name = tier.table_specs[0].name
    tables = getattr(collection, "dynamic_tables", None)
    if tables is None or name not in tables.tables:
        raise ValueError(
            f"table {name!r}: {type(collection).__name__} has no dynamic table of that name; "
            "give it the table with dynamic=DynamicTableConfig(...)"
        )
    bags: Any = getattr(collection, "embedding_bags", {})
    weight = bags[name].weight
    assert isinstance(weight, Tensor)
    if weight.shape[1] != tier.dim:
        raise ValueError(
            f"table {name!r}: the in-memory table has embedding_dim {weight.shape[1]}, the "
            f"raw-id tier {tier.dim}; build both with the same embedding_dim"
        )
    return name, tables.table(name), weight


def _state_of(collection: nn.Module, name: str) -> dict[str, Tensor]:
    """The collection's fused optimizer state of table `name` by state name (live tensors)."""
    optimizer = getattr(collection, "fused_optimizer", None)
    if optimizer is None:
        return {}
    state = optimizer.state_dict().get("state", {}).get(f"embedding_bags.{name}.weight", {})
    assert isinstance(state, Mapping)
    return {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")}


def _check_state(
    name: str, columns: tuple[tuple[str, int], ...], state: Mapping[str, Tensor], optional: bool
) -> None:
    mine = sorted(n for n, _ in columns)
    if sorted(state) != mine and not (optional and not state):
        raise ValueError(
            f"table {name!r}: the in-memory table's optimizer keeps state {sorted(state)}, the "
            f"raw-id tier's {mine}; give both the same optimizer"
        )


def load_from_dynamic(tier: RawIdTieredEmbeddingBag, collection: nn.Module) -> None:
    """Replace `tier`'s table by the ids, rows and optimizer state of the same table in
    `collection` (module docstring)."""
    name, table, weight = _parts(tier, collection)
    columns = tuple(tier.cache.store.layout.state)
    state = _state_of(collection, name)
    _check_state(name, columns, state, optional=not hasattr(collection, "fused_optimizer"))
    slots = torch.nonzero(table.occupied).reshape(-1)
    ids = table.slot_ids[slots]
    if not state:
        state = {n: torch.zeros(table.capacity, w) for n, w in columns}
    rows = join_rows(weight.detach()[slots], {n: v[slots] for n, v in state.items()}, columns)
    tier.cancel_prefetches()
    empty(tier.cache)
    store = tier.cache.store
    assert isinstance(store, RawIdRows)
    if ids.numel():
        store.write(ids.numpy(), rows.numpy())
    store.flush()


def load_into_dynamic(
    tier: RawIdTieredEmbeddingBag, collection: nn.Module, *, evict_to_fit: bool = False
) -> None:
    """Replace the same table in `collection` by every id `tier`'s store holds, with its row
    and optimizer state (module docstring)."""
    name, table, weight = _parts(tier, collection)
    columns = tuple(tier.cache.store.layout.state)
    state = _state_of(collection, name)
    _check_state(name, columns, state, optional=not hasattr(collection, "fused_optimizer"))
    tier._drain()
    ids = store_ids(tier.cache)
    n, capacity = ids.numel(), table.capacity
    if n > capacity:
        if not evict_to_fit:
            raise ValueError(
                f"table {name!r}: the raw-id tier holds {n} ids, the in-memory table has "
                f"capacity {capacity}; give it num_embeddings >= {n}, or pass "
                "evict_to_fit=True to keep as many as fit (the tier keeps no policy metadata: "
                "every id ties, the largest ids are kept)"
            )
        ids, n = ids[n - capacity :], capacity
    rows = torch.from_numpy(tier.cache.store.read(ids.numpy()))
    row_weight, row_state = split_rows(rows, tier.dim, columns)
    slots = torch.arange(n, dtype=torch.int64)
    table.load_items(
        ids, slots, last_seen=torch.zeros(n, dtype=torch.int64), counts=torch.ones_like(ids)
    )
    table._counters["steps"] = 0
    table._run_reset_hooks(torch.arange(n, capacity, dtype=torch.int64))
    with torch.no_grad():
        weight[:n] = row_weight
        for key, value in state.items():
            value[:n] = row_state[key].reshape(value[:n].shape)
