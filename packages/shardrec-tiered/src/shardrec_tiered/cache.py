"""`RowCache`: a fixed number of one table's rows (weight and optimizer state) in memory.

```
slots [0, S)      weight (S, D), state (S, D) or (S,)   views of the group's cache tensors
id_of_slot (S,)   the table row a slot holds (-1 when empty; raw ids may be any int64)
held (S,)         whether the slot holds a row
pins (S,)         in-flight batches holding the slot (never evicted while > 0)
dirty (S,)        updated since it was read: written back before the slot is reused
score (S,)        LRU: the admission tick of its last use; LFU: its use count
```

`admit(ids)` maps a batch's distinct ids to slots: hits are found through the `SlotMap`,
misses take the slots of lowest score that are neither pinned nor hit by this batch (one
`topk`), whose dirty rows are written back first. No Python loop over ids or slots. A cache of
dense ids on the CPU (a `DenseSlotMap`, float32 rows) does the same bookkeeping in native code
(native_cache.py: three C calls around the store's write-back and read instead of some thirty
tensor operations); ties among victims of equal score may then fall on other slots, which
changes no value. A lookup whose caches all run natively over mapped stores admits a batch for
all its tables in one C call instead (table_batch.py), with the same victims.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import torch
from torch import Tensor

from shardrec_tiered.native_cache import native_cache
from shardrec_tiered.options import CachePolicy
from shardrec_tiered.row_store import RowStore
from shardrec_tiered.slot_map import DenseSlotMap, SlotMap

__all__ = ["CacheFullError", "CacheTooSmallError", "RowCache"]

_PROTECTED = torch.iinfo(torch.int64).max


class CacheTooSmallError(ValueError):
    """A batch touches more distinct rows of a table than its cache holds."""


class CacheFullError(RuntimeError):
    """Every evictable slot is pinned by in-flight batches (prefetched or awaiting backward)."""


class RowCache:
    """One table's cache (module docstring) over `weight` / `state` rows, backed by `store`."""

    def __init__(
        self,
        store: RowStore,
        weight: Tensor,
        state: dict[str, Tensor],
        policy: CachePolicy,
        slot_map: SlotMap | None = None,
        pin_lock: threading.Lock | None = None,
    ) -> None:
        self.store = store
        self.table = store.layout.table
        self.weight = weight
        self.state = state
        self.policy = CachePolicy(policy)
        self.slots = weight.shape[0]
        self.map: SlotMap = (
            slot_map if slot_map is not None else DenseSlotMap(store.layout.num_rows)
        )
        self.id_of_slot = torch.full((self.slots,), -1, dtype=torch.int64)
        self.held = torch.zeros(self.slots, dtype=torch.bool)
        self.pins = torch.zeros(self.slots, dtype=torch.int32)
        self.dirty = torch.zeros(self.slots, dtype=torch.bool)
        self.score = torch.full((self.slots,), -1, dtype=torch.int64)
        self._tick = 0
        self._pin_lock = pin_lock if pin_lock is not None else threading.Lock()
        self._columns_key: tuple[int, ...] | None = None
        self._ready_key: tuple[object, ...] | None = None
        self._ready = False
        self._column_ptrs = (ctypes.c_void_p * 0)()
        self._column_widths = (ctypes.c_int64 * 0)()
        self.hits = 0
        self.misses = 0

    def admit(
        self, ids: Tensor, counts: Tensor | None = None, *, pin: bool, count: bool = True
    ) -> Tensor:
        """Slots of distinct table rows `ids` (int64), loading the missing ones.

        counts: uses of each id in the batch (LFU scores; default 1). pin: hold the slots until
        `unpin`. count: add to `hits` / `misses` (a forward after its batch's prefetch
        does not: the prefetch counted). Raises CacheTooSmallError if `ids` outnumber the
        slots, CacheFullError if pins leave too few evictable slots.
        """
        if ids.numel() > self.slots:
            raise CacheTooSmallError(
                f"table {self.table!r}: a batch touches {ids.numel()} distinct rows but the "
                f"cache holds {self.slots} rows; raise the cache size (CacheParams.load_factor "
                f">= {ids.numel() / self.store.layout.num_rows:.4g} or cache_rows >= "
                f"{ids.numel()})"
            )
        self._tick += 1
        if self._native_ready():
            return self._admit_native(ids, counts, pin=pin, count=count)
        slots = self.map.find(ids)
        hit = slots >= 0
        missing = ids[~hit]
        k = missing.numel()
        if count:
            self.hits += ids.numel() - k
            self.misses += k
        if k:
            victims = self._victims(slots[hit], k)
            self._evict(victims)
            rows = self.store.read(missing.numpy())
            self._unpack(victims, torch.from_numpy(rows))
            self.id_of_slot[victims] = missing
            self.held[victims] = True
            self.map.insert(missing, victims)
            self.score[victims] = 0
            slots[~hit] = victims
        if self.policy is CachePolicy.LRU:
            self.score[slots] = self._tick
        else:
            self.score[slots] += 1 if counts is None else counts
        if pin:
            with self._pin_lock:
                self.pins[slots] += 1
        return slots

    def _native_ready(self) -> bool:
        """Whether `admit` can run in native code (module docstring); decided again when the
        map or the row blocks are replaced (a raw-id map, `_apply`)."""
        key = (self.map, self.weight, *self.state.values())
        if (
            self._ready_key is None
            or len(key) != len(self._ready_key)
            or any(a is not b for a, b in zip(key, self._ready_key, strict=True))
        ):
            self._ready_key, self._ready = key, self._check_native()
        return self._ready

    def _check_native(self) -> bool:
        if not isinstance(self.map, DenseSlotMap) or native_cache() is None:
            return False
        blocks = [self.weight, *self.state.values()]
        return (
            all(
                t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()
                for t in blocks
            )
            and sum(1 if t.dim() == 1 else t.shape[1] for t in blocks) == self.store.layout.stride
        )

    def _columns(self) -> tuple[ctypes.Array[ctypes.c_void_p], ctypes.Array[ctypes.c_int64]]:
        """The row blocks' addresses and widths for the C calls (rebuilt when they move)."""
        blocks = [self.weight.detach(), *self.state.values()]
        key = tuple(t.data_ptr() for t in blocks)
        if self._columns_key != key:
            self._columns_key = key
            self._column_ptrs = (ctypes.c_void_p * len(blocks))(*key)
            widths = [1 if t.dim() == 1 else t.shape[1] for t in blocks]
            self._column_widths = (ctypes.c_int64 * len(blocks))(*widths)
        return self._column_ptrs, self._column_widths

    def _admit_native(
        self, ids: Tensor, counts: Tensor | None, *, pin: bool, count: bool
    ) -> Tensor:
        """`admit` in native code (module docstring): plan (hits, victims), pack the dirty
        victims, write them back, read the misses, install; nothing changes before the store's
        write-back and read succeed."""
        lib = native_cache()
        assert lib is not None and isinstance(self.map, DenseSlotMap)
        ids = ids.to(torch.int64).contiguous()
        n = ids.numel()
        table = self.map._slot
        slots = torch.empty(n, dtype=torch.int64)
        victims = torch.empty(n, dtype=torch.int64)
        evictable = ctypes.c_int64(0)
        k = int(
            lib.sr_cache_plan(
                ids.data_ptr(), n, table.data_ptr(), self.score.data_ptr(),
                self.pins.data_ptr(), self.held.data_ptr(), self.slots, slots.data_ptr(),
                victims.data_ptr(), ctypes.byref(evictable),
            )
        )  # fmt: skip
        if k == -2:
            raise MemoryError(f"table {self.table!r}: no memory for the cache's victim choice")
        if k < 0:
            self._refuse_full(int((slots < 0).sum()), int(evictable.value))
        if count:
            self.hits += n - k
            self.misses += k
        cols, widths = self._columns()
        stride = self.store.layout.stride
        rows = np.empty((0, stride), dtype=np.float32)
        if k:
            out_ids = np.empty(k, dtype=np.int64)
            out_rows = np.empty((k, stride), dtype=np.float32)
            m = int(
                lib.sr_cache_pack(
                    victims.data_ptr(), k, self.held.data_ptr(), self.dirty.data_ptr(),
                    self.id_of_slot.data_ptr(), cols, widths, len(cols), stride,
                    out_ids.ctypes.data, out_rows.ctypes.data,
                )
            )  # fmt: skip
            if m < 0:
                raise MemoryError(f"table {self.table!r}: no memory for the write-back")
            if m:
                self.store.write(out_ids[:m], out_rows[:m])
            rows = np.ascontiguousarray(self.store.read(ids[slots < 0].numpy()), np.float32)
        if counts is not None:
            counts = counts.to(torch.int64).contiguous()
        with self._pin_lock:  # install also pins the batch's slots (`unpin` runs anywhere)
            self._install(lib, ids, slots, victims, k, rows, counts, pin=pin)
        return slots

    def _install(
        self,
        lib: ctypes.CDLL,
        ids: Tensor,
        slots: Tensor,
        victims: Tensor,
        k: int,
        rows: np.ndarray,
        counts: Tensor | None,
        *,
        pin: bool,
    ) -> None:
        cols, widths = self._columns()
        stride = self.store.layout.stride
        lfu = self.policy is CachePolicy.LFU
        assert isinstance(self.map, DenseSlotMap)
        table = self.map._slot
        n = ids.numel()
        lib.sr_cache_install(
            ids.data_ptr(), n, slots.data_ptr(), victims.data_ptr(), k, rows.ctypes.data,
            stride, cols, widths, len(cols), table.data_ptr(), self.id_of_slot.data_ptr(),
            self.held.data_ptr(), self.dirty.data_ptr(), self.score.data_ptr(), int(lfu),
            self._tick, counts.data_ptr() if lfu and counts is not None else None,
            self.pins.data_ptr() if pin else None,
        )  # fmt: skip

    def _refuse_full(self, k: int, free: int) -> None:
        pinned = int((self.pins > 0).sum())
        raise CacheFullError(
            f"table {self.table!r}: {k} rows to load but only {free} of {self.slots} cache "
            f"slots are evictable ({pinned} pinned by in-flight batches: prefetched, or "
            "awaiting backward); prefetch fewer batches ahead or raise the cache size"
        )

    def _victims(self, hit_slots: Tensor, k: int) -> Tensor:
        """The `k` evictable slots of lowest score (empty slots first)."""
        score = self.score.clone()
        score[self.pins > 0] = _PROTECTED
        score[hit_slots] = _PROTECTED
        free = int((score != _PROTECTED).sum())
        if free < k:
            self._refuse_full(k, free)
        return torch.topk(score, k, largest=False, sorted=False).indices

    def _evict(self, victims: Tensor) -> None:
        """Write back the dirty rows among `victims` and forget their ids."""
        old = self.id_of_slot[victims]
        held = self.held[victims]
        if not bool(held.any()):
            return
        self._write_back(victims[held & self.dirty[victims]])
        self.map.erase(old[held])
        self.id_of_slot[victims] = -1
        self.held[victims] = False

    def _write_back(self, slots: Tensor) -> None:
        if slots.numel() == 0:
            return
        ids = self.id_of_slot[slots]
        order = torch.argsort(ids)
        slots, ids = slots[order], ids[order]
        self.store.write(ids.numpy(), self._pack(slots).numpy())
        self.dirty[slots] = False

    def _pack(self, slots: Tensor) -> Tensor:
        parts = [self.weight.detach()[slots]]
        for t in self.state.values():
            rows = t[slots]
            parts.append(rows if rows.dim() == 2 else rows.unsqueeze(1))
        return torch.cat(parts, dim=1).cpu()

    def _unpack(self, slots: Tensor, rows: Tensor) -> None:
        dim = self.weight.shape[1]
        with torch.no_grad():
            self.weight[slots] = rows[:, :dim].to(self.weight.device)
            col = dim
            for t in self.state.values():
                width = t.shape[1] if t.dim() == 2 else 1
                block = rows[:, col : col + width]
                t[slots] = (block if t.dim() == 2 else block.squeeze(1)).to(t.device)
                col += width

    def mark_dirty(self, slots: Tensor) -> None:
        self.dirty[slots] = True

    def unpin(self, slots: Tensor) -> None:
        """Release one hold on `slots` (any thread: a backward releases while a background
        prefetch admits; a stale read of `pins` there only protects more slots)."""
        with self._pin_lock:
            self.pins[slots] -= 1

    def flush(self) -> None:
        """Write every dirty row back and make the store durable (rows stay cached)."""
        self._write_back(torch.nonzero(self.dirty).flatten())
        self.store.flush()

    def write_back_dirty(self) -> None:
        """Write every dirty row back (no fdatasync: the rows are in the store's file)."""
        self._write_back(torch.nonzero(self.dirty).flatten())

    def refresh(self, ids: Tensor) -> None:
        """Re-read the cached ones among table rows `ids` (distinct, sorted) from the store:
        it was written under them (a checkpoint loaded). Their slots, pins and scores stay."""
        slots = self.map.find(ids)
        held = slots >= 0
        if not bool(held.any()):
            return
        ids, slots = ids[held], slots[held]
        self._unpack(slots, torch.from_numpy(self.store.read(ids.numpy())))
        self.dirty[slots] = False

    def read_all(self) -> np.ndarray:
        """`(num_rows, stride)` the whole table as the store holds it after a flush (small
        tables: tests and conversions)."""
        self.flush()
        return self.store.read(np.arange(self.store.layout.num_rows, dtype=np.int64))
