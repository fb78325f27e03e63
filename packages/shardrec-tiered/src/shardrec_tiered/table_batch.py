"""`TableBatch`: a batch's admission for all of a tiered lookup's tables in one native call.

A dense-id cache on the CPU admits a table's rows in three C calls with the store's
write-back and read between them (cache.py); over a lookup's 26 tables that is some 80 native
calls and about 4-5 ms of interpreter and tensor glue per batch besides the copies. When every
table of the lookup qualifies (its cache runs natively and its store is mapped with native
copies, `FlatFileStore.native_map`), one C call (`sr_cache_admit_tables`, `_native/tiercache.c`)
plans every table (nothing changes until all plans stand), then per table copies the dirty
victims' rows into the mapped store, the misses' rows out of it into the victims' slots, and
scores them, without the GIL. The batch's pins and dirty marks are one call each too
(`BatchPins`).

Error semantics stay the per-table path's: a refused table (more distinct rows than slots, too
few evictable slots) makes the call change nothing, and that table's own admission raises its
error (the per-table path would have loaded the tables before it first). A mapped store's
write-back needs no space (its blocks were reserved), and a store that is not mapped, or whose
native copy is replaced, never takes this path, so a full disk is reported by the store as
StoreIOError naming the table, the cache unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from shardrec_tiered.cache import RowCache
from shardrec_tiered.layout import HEADER_BYTES
from shardrec_tiered.native_cache import native_cache
from shardrec_tiered.options import CachePolicy
from shardrec_tiered.store import FlatFileStore

__all__ = ["BatchPins", "TableBatch"]

_BASE = 10  # T_BASE in tiercache.c: the field of the mapped store's address


class BatchPins:
    """The pins one batch holds over all tables: `slots` (each distinct id's slot in its
    table), table t's ids at `[bounds[t], bounds[t + 1])`, `tab` the tables' addresses."""

    __slots__ = ("_batch", "_bounds", "_slots", "_tab")

    def __init__(self, batch: TableBatch, slots: Tensor, bounds: np.ndarray, tab: np.ndarray):
        self._batch, self._slots, self._bounds, self._tab = batch, slots, bounds, tab

    def mark_dirty(self) -> None:
        """Mark the batch's slots dirty (its backward updates them)."""
        lib = native_cache()
        assert lib is not None
        t = self._tab
        lib.sr_cache_dirty_tables(
            self._slots.data_ptr(), self._bounds.ctypes.data, t.ctypes.data, t.shape[0], t.shape[1]
        )

    def release(self) -> None:
        """Release the batch's hold on its slots (any thread)."""
        self._batch.pin(self._slots, self._bounds, self._tab, -1)


class TableBatch:
    """The all-tables admission (module docstring) of `caches` (group rows from
    `row_offsets`, group slots from `slot_offsets`); `pin_lock` is the caches' pin lock."""

    def __init__(
        self,
        caches: Sequence[RowCache],
        row_offsets: Sequence[int],
        slot_offsets: Sequence[int],
        pin_lock: threading.Lock,
    ) -> None:
        self.caches = list(caches)
        self.row_offsets = list(row_offsets)
        self.slot_offsets = list(slot_offsets)
        self.pin_lock = pin_lock
        self._tab: np.ndarray | None = None
        self._widths = np.zeros(0, dtype=np.int64)
        self._stores: list[FlatFileStore] = []
        self._known = False

    def invalidate(self) -> None:
        """The caches' tensors moved (`_apply`) or their maps changed: look again."""
        self._known, self._tab = False, None

    def _table(self) -> np.ndarray | None:
        """The tables' addresses (tiercache.c's `tab`), or None where a table does not qualify."""
        if not self._known:
            self._known, self._tab = True, self._build()
        if self._tab is None:
            return None
        for store, address in zip(self._stores, self._tab[:, _BASE].tolist(), strict=True):
            if store.native_map() != address:  # unmapped since, or its native copy replaced
                return None
        return self._tab

    def _build(self) -> np.ndarray | None:
        if native_cache() is None:
            return None
        rows: list[list[int]] = []
        widths: list[int] | None = None
        self._stores = []
        for cache, row0, slot0 in zip(
            self.caches, self.row_offsets, self.slot_offsets, strict=True
        ):
            store = cache.store
            if not cache._native_ready() or not isinstance(store, FlatFileStore):
                return None
            address = store.native_map()
            if address is None:
                return None
            cols, w = cache._columns()
            if widths is None:
                widths = list(w)
            if list(w) != widths:
                return None
            slot_map = cache.map._slot  # type: ignore[attr-defined]  # a DenseSlotMap (_native_ready)
            rows.append(
                [
                    row0, store.layout.num_rows, slot0, cache.slots, slot_map.data_ptr(),
                    cache.score.data_ptr(), cache.pins.data_ptr(), cache.held.data_ptr(),
                    cache.dirty.data_ptr(), cache.id_of_slot.data_ptr(), address,
                    int(cache.policy is CachePolicy.LFU), *(int(p or 0) for p in cols),
                ]
            )  # fmt: skip
            self._stores.append(store)
        assert widths is not None
        self._widths = np.array(widths, dtype=np.int64)
        return np.array(rows, dtype=np.int64)

    def pin(self, slots: Tensor, bounds: np.ndarray, tab: np.ndarray, delta: int) -> None:
        lib = native_cache()
        assert lib is not None
        with self.pin_lock:
            lib.sr_cache_pin_tables(
                slots.data_ptr(), bounds.ctypes.data, tab.ctypes.data, tab.shape[0],
                tab.shape[1], delta,
            )  # fmt: skip

    def admit(
        self, unique: Tensor, counts: Tensor, *, pin: bool, count: bool
    ) -> tuple[Tensor, BatchPins | None] | None:
        """Group slots of the sorted distinct group rows `unique` (uses `counts`), loading the
        misses, and the pins taken; None when the per-table path must run instead (a table
        does not qualify). A table that refuses the batch raises its cache's error
        (CacheTooSmallError, CacheFullError) with nothing changed in any table."""
        tab = self._table()
        lib = native_cache()
        if tab is None or lib is None:
            return None
        n = unique.numel()
        ntab = tab.shape[0]
        unique = unique.to(torch.int64).contiguous()
        counts = counts.to(torch.int64).contiguous()
        slots = torch.empty(n, dtype=torch.int64)
        group = torch.empty(n, dtype=torch.int64)
        bounds = np.empty(ntab + 1, dtype=np.int64)
        done = np.empty(2 * ntab, dtype=np.int64)
        ticks = np.array([c._tick for c in self.caches], dtype=np.int64)
        status = int(
            lib.sr_cache_admit_tables(
                unique.data_ptr(), n, counts.data_ptr(), tab.ctypes.data, ntab, tab.shape[1],
                self._widths.ctypes.data, self._widths.size, int(self._widths.sum()),
                HEADER_BYTES, ticks.ctypes.data, slots.data_ptr(), group.data_ptr(),
                bounds.ctypes.data, done.ctypes.data,
            )
        )  # fmt: skip
        if status == -2:
            raise MemoryError("tiered lookup: no memory for a batch's admission")
        if status == -3:
            raise IndexError(f"tiered lookup: a group row of {unique.tolist()} past its tables")
        if status > 0:  # table status - 1 refused: its own admission raises the error
            t = status - 1
            a, b = int(bounds[t]), int(bounds[t + 1])
            self.caches[t].admit(unique[a:b] - self.row_offsets[t], pin=False, count=False)
            return None  # it did not refuse after all (pins released since): per table
        b, d, tk = bounds.tolist(), done.tolist(), ticks.tolist()
        for t, cache in enumerate(self.caches):
            if b[t] == b[t + 1]:
                continue
            cache._tick = tk[t]
            k, written = d[2 * t], d[2 * t + 1]
            if count:
                cache.hits += b[t + 1] - b[t] - k
                cache.misses += k
            row_bytes = self._stores[t].layout.row_bytes
            self._stores[t].bytes_read += k * row_bytes
            self._stores[t].bytes_written += written * row_bytes
        if not pin:
            return group, None
        self.pin(slots, bounds, tab, 1)
        return group, BatchPins(self, slots, bounds, tab)
