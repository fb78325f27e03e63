"""Checkpoints of raw-id tiered tables: every id the store keeps, its row and optimizer state.

A raw-id table has no row range: its checkpoint is the list of ids its store holds and their
store rows (weight, then the optimizer state columns, as the store keeps them), taken after
the cache's dirty rows are written back:

```
<prefix>tier.<rank>.ids    (n,) int64            every id the store holds (key order)
<prefix>tier.<rank>.rows   (n, stride) float32   their rows: weight | optimizer state columns
```

Inside `streaming_state_dict()` (what `shardrec_dmp.save` / `load` use) `rows` is a
`KeyValueSlice`: DCP saves it a chunk of rows at a time (`CHUNK_BYTES`, one multi-get each)
and loads into it a piece at a time (one write batch each), so only the ids (8 bytes each)
are ever whole in memory. Outside it, `rows` is a tensor (small tables, tests).

Loading replaces the store's content: the cache is emptied (no write-back: the checkpoint is
the truth), the store cleared, the saved rows put. An id the checkpoint does not hold reads
its initial row again, as it did before it was first written.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from shardrec_tiered.cache import RowCache
from shardrec_tiered.checkpoint import StreamedTensor, is_streaming
from shardrec_tiered.raw_ids import RawIdRows

if TYPE_CHECKING:
    from shardrec_tiered.raw_ids import RawIdTieredEmbeddingBag

__all__ = [
    "TIER",
    "KeyValueSlice",
    "RawIdTable",
    "empty",
    "join_rows",
    "load_rows",
    "split_rows",
    "store_ids",
    "tier_entries",
    "tier_parts",
]

TIER = "tier."
"""The state_dict key infix of a raw-id tier's entries (module docstring)."""


def _chunk_rows(kv: RawIdRows) -> int:
    from shardrec_tiered import checkpoint

    return max(1, checkpoint.CHUNK_BYTES // kv.layout.row_bytes)


class KeyValueSlice(StreamedTensor):
    """The `(n, stride)` store rows of `ids` in `store`, standing in for a tensor: saved a
    chunk of rows at a time, loaded a piece at a time (each piece put under its ids)."""

    def __init__(self, store: RawIdRows, ids: Tensor, keep: Tensor | None = None) -> None:
        self.store = store
        self.ids = ids.reshape(-1).long()
        self.keep = keep
        """Loading: which of `ids` this store takes (None: all; a row_wise part's own ids)."""
        self.shape = torch.Size((self.ids.numel(), store.layout.stride))

    def size(self) -> torch.Size:
        return self.shape

    def dim(self) -> int:
        return 2

    def numel(self) -> int:
        return int(self.shape.numel())

    def chunks(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        n, stride = self.shape
        step = _chunk_rows(self.store)
        return [((lo, 0), (min(step, n - lo), stride)) for lo in range(0, n, step)]

    def read_chunk(self, offsets: Sequence[int], sizes: Sequence[int]) -> Tensor:
        lo, n = int(offsets[0]), int(sizes[0])
        ids = self.ids[lo : lo + n].numpy()
        rows, found = self.store.kv.get(ids)
        if not bool(found.all()):
            missing = ids[~found][:3].tolist()
            raise RuntimeError(
                f"table {self.store.layout.table!r}: ids {missing} left the store during a save"
            )
        return torch.from_numpy(np.ascontiguousarray(rows[:, int(offsets[1]) :][:, : sizes[1]]))

    def write_region(self, offsets: Sequence[int], value: Tensor) -> None:
        lo, col = int(offsets[0]), int(offsets[1])
        if col != 0 or value.shape[1] != self.shape[1]:
            raise ValueError(
                f"table {self.store.layout.table!r}: a loaded piece of raw-id rows must span "
                f"every column ({self.shape[1]}), got columns {col}..{col + value.shape[1]}"
            )
        ids = self.ids[lo : lo + value.shape[0]]
        rows = value.detach().to(torch.float32)
        if self.keep is not None:
            mine = self.keep[lo : lo + value.shape[0]]
            ids, rows = ids[mine], rows[mine]
        if ids.numel():
            self.store.write(ids.numpy(), rows.numpy())

    def read(self) -> Tensor:
        """The whole tensor (small tables)."""
        return (
            torch.cat([self.read_chunk(o, s) for o, s in self.chunks()])
            if self.ids.numel()
            else (torch.zeros(self.shape))
        )

    def __repr__(self) -> str:
        return f"KeyValueSlice({self.store.layout.table!r}, shape={tuple(self.shape)})"


def join_rows(
    weight: Tensor, state: Mapping[str, Tensor], columns: Sequence[tuple[str, int]]
) -> Tensor:
    """`(n, stride)` store rows from `(n, dim)` weights and each optimizer state (`(n,)` or
    `(n, width)`), in the store's column order `columns` (`(name, width)`, StoreLayout.state):
    how an in-memory dynamic table's rows enter a raw-id tier."""
    blocks = [weight.detach().to(torch.float32).reshape(weight.shape[0], -1)]
    for name, width in columns:
        value = state[name].detach().to(torch.float32).reshape(weight.shape[0], -1)
        if value.shape[1] != width:
            raise ValueError(
                f"optimizer state {name!r} has {value.shape[1]} columns, the store's rows "
                f"keep {width}; load it into a table with the optimizer it was saved with"
            )
        blocks.append(value)
    return torch.cat(blocks, dim=1)


def split_rows(
    rows: Tensor, dim: int, columns: Sequence[tuple[str, int]]
) -> tuple[Tensor, dict[str, Tensor]]:
    """The inverse of `join_rows`: `(n, dim)` weights and each state (a width-1 column as
    `(n,)`): how a raw-id tier's rows enter an in-memory dynamic table."""
    state: dict[str, Tensor] = {}
    col = dim
    for name, width in columns:
        block = rows[:, col : col + width]
        state[name] = block.reshape(-1) if width == 1 else block
        col += width
    return rows[:, :dim], state


def store_ids(cache: RowCache) -> Tensor:
    """Every id `cache`'s store holds after its dirty rows are written back (sorted)."""
    cache.flush()
    store = cache.store
    assert isinstance(store, RawIdRows)
    chunks = [torch.from_numpy(np.array(c, dtype=np.int64)) for c in store.kv.ids()]
    if not chunks:
        return torch.zeros(0, dtype=torch.int64)
    return torch.sort(torch.cat(chunks)).values


def tier_entries(cache: RowCache, prefix: str, rank: int) -> dict[str, object]:
    """The state_dict entries of `cache`'s raw-id tier (module docstring)."""
    store = cache.store
    assert isinstance(store, RawIdRows)
    ids = store_ids(cache)
    rows = KeyValueSlice(store, ids)
    if ids.numel() == 0:  # no chunks to stream: a plain empty tensor keeps the key saved
        return {f"{prefix}{TIER}{rank}.ids": ids, f"{prefix}{TIER}{rank}.rows": rows.read()}
    return {
        f"{prefix}{TIER}{rank}.ids": ids,
        f"{prefix}{TIER}{rank}.rows": rows if is_streaming() else rows.read(),
    }


def empty(cache: RowCache) -> None:
    """Forget every cached id without writing it back, then every stored row (a load
    replaces them). Refused while a batch in flight holds rows."""
    if bool((cache.pins > 0).any()):
        raise RuntimeError(
            f"table {cache.table!r}: cannot load a checkpoint while a batch in flight holds "
            "cached rows; finish (or drop) the pipeline's batches first"
        )
    held = torch.nonzero(cache.held).flatten()
    cache.map.erase(cache.id_of_slot[held])
    cache.id_of_slot[:] = -1
    cache.held[:] = False
    cache.dirty[:] = False
    cache.score[:] = -1
    store = cache.store
    assert isinstance(store, RawIdRows)
    store.kv.clear()


def load_rows(cache: RowCache, parts: Sequence[tuple[Tensor, Tensor]]) -> None:
    """Replace `cache`'s table by `(ids, rows)` parts (plain tensors: `load_state_dict`)."""
    store = cache.store
    assert isinstance(store, RawIdRows)
    stride = store.layout.stride
    for ids, rows in parts:
        if rows.dim() != 2 or rows.shape != (ids.numel(), stride):
            raise ValueError(
                f"table {cache.table!r}: a raw-id checkpoint part of {ids.numel()} ids has rows "
                f"of shape {tuple(rows.shape)}, the table's rows are ({ids.numel()}, {stride}) "
                "(weight and optimizer state); load it into a table of the same embedding_dim "
                "and optimizer"
            )
    empty(cache)
    for ids, rows in parts:
        if ids.numel():
            store.write(ids.reshape(-1).long().numpy(), rows.detach().to(torch.float32).numpy())
    store.flush()


def tier_parts(state: dict[str, object], prefix: str, table: str) -> list[tuple[Tensor, Tensor]]:
    """Pop the `(ids, rows)` tier entries under `prefix` from `state` (rows read whole)."""
    keys = sorted(k for k in state if k.startswith(prefix + TIER) and k.endswith(".ids"))
    parts = []
    for key in keys:
        ids = state.pop(key)
        rows = state.pop(key[: -len(".ids")] + ".rows", None)
        if isinstance(rows, KeyValueSlice):
            rows = rows.read()
        if not isinstance(ids, Tensor) or not isinstance(rows, Tensor):
            raise ValueError(
                f"table {table!r}: raw-id tier entry {key!r} needs ids and rows tensors"
            )
        parts.append((ids, rows))
    return parts


class RawIdTable(nn.Module):
    """Stands for a `RawIdTieredEmbeddingBag`'s table in its state_dict: the tier entries of
    every id its store holds (module docstring) and the optimizer's `step`."""

    def __init__(self, owner: RawIdTieredEmbeddingBag) -> None:
        super().__init__()
        self.name = owner.table_specs[0].name
        self._owner = weakref.ref(owner)  # not a submodule: the owner holds this one

    def owner(self) -> RawIdTieredEmbeddingBag:
        owner = self._owner()
        if owner is None:
            raise RuntimeError(f"raw-id table {self.name!r}: its lookup module is gone")
        return owner

    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        owner = self.owner()
        owner._drain()  # a background prefetch admitting rows
        destination.update(tier_entries(owner.cache, prefix, 0))
        destination[prefix + "step"] = torch.tensor(owner.step, dtype=torch.int64)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: object,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        owner = self.owner()
        state = {k: v for k, v in state_dict.items() if k.startswith(prefix)}
        parts = tier_parts(state, prefix, self.name)
        step = state.pop(prefix + "step", None)
        if not parts or step is None:
            missing_keys.append(prefix + (f"{TIER}0.ids" if not parts else "step"))
            return
        unexpected_keys.extend(state)
        owner.cancel_prefetches()
        load_rows(owner.cache, parts)
        owner.step = int(step)

    def extra_repr(self) -> str:
        return f"{self.name!r} (raw ids, tiered)"
