"""`IdSlotMap`: raw int64 id -> slot, with a native C hash map and a torch fallback.

The map stores only *which slot an id owns*; which slot a new id gets is decided by its
caller (`DynamicTable`), so both backends hold the same id -> slot pairs for the same calls:

- `native`: open addressing with linear probing over `num_buckets` (a power of two) `{key,
  slot}` buckets in one int64 tensor; a negative slot marks an empty bucket, so no id value is
  reserved; deletion shifts the probe run back (no tombstones). `_native/idmap.c`.
- `torch`: the ids kept sorted with their slots; `find` is a `searchsorted`. Used when the
  native kernels are unavailable (no compiler, `SHARDREC_NATIVE=0`) or asked for.

docs/design/dynamic-id-map.md explains the choice and how a backing store plugs in.
"""

from __future__ import annotations

import ctypes
from typing import Literal

import torch
from torch import Tensor

from shardrec_embedding._native.loader import native_library_of
from shardrec_embedding.dynamic.memory import huge_empty

__all__ = ["IdMapBackend", "IdSlotMap", "idmap_native_available"]

IdMapBackend = Literal["auto", "native", "torch"]

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_F32 = ctypes.c_float


_TYPED: set[int] = set()


def _library() -> ctypes.CDLL | None:
    lib = native_library_of("idmap.c")
    if lib is not None and id(lib) not in _TYPED:
        for name, args in (
            ("sr_idmap_find", (_PTR, _I64, _PTR, _I64, _PTR)),
            ("sr_idmap_insert", (_PTR, _I64, _PTR, _PTR, _I64)),
            ("sr_idmap_erase", (_PTR, _I64, _PTR, _I64)),
            ("sr_idmap_distinct_missing", (_PTR, _PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR)),
            ("sr_idmap_merge_order", (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _PTR)),
            ("sr_idmap_permute", (_PTR, _PTR, _I64, _PTR)),
            ("sr_idmap_split_f32", (_PTR, _I64, _I64, _F32, _PTR, _PTR, _PTR)),
            (
                "sr_idmap_find_touch_missing",
                (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _I64, _PTR, _PTR),
            ),
            ("sr_idmap_fill_missing", (_PTR, _I64, _PTR)),
            (
                "sr_idmap_find_touch_pending",
                (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _I64, _PTR, _PTR),
            ),
            (
                "sr_idmap_find_stamp_pending",
                (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _PTR, _PTR),
            ),
            ("sr_idmap_stamps_sync", (_PTR, _I64, _PTR, _I64)),
            ("sr_idmap_drop_pending", (_PTR, _I64, _PTR, _I64)),
            ("sr_idmap_free_slots", (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _PTR, _PTR)),
            (
                "sr_idmap_admit_slots",
                (_PTR, _I64, _PTR, _PTR, _PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR),
            ),
            (
                "sr_idmap_replace_slots",
                (_PTR, _I64, _PTR, _PTR, _PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR),
            ),
            ("sr_idmap_find_touch", (_PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _I64)),
            ("sr_idmap_lru_pick", (_PTR, _PTR, _I64, _I64, _I64, _I64, _PTR)),
            ("sr_idmap_fill_rows", (_PTR, _I64, _I64, _PTR, _I64, _I64, _F32)),
            (
                "sr_idmap_init_rows",
                (_PTR, _I64, _I64, _PTR, _I64, _I64, _I64, _I64, _F32, _F32, _I64),
            ),
        ):
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = _I64
        lib.sr_idmap_kth_f32.argtypes = (_PTR, _I64, _I64, _PTR)
        lib.sr_idmap_kth_f32.restype = _F32
        _TYPED.add(id(lib))
    return lib


def idmap_native_available() -> bool:
    """True when the native id map is built and loaded."""
    return _library() is not None


def _check_out(out: Tensor, n: int, what: str) -> None:
    if (
        out.dtype is not torch.int64
        or out.device.type != "cpu"
        or not out.is_contiguous()
        or out.numel() != n
    ):
        raise ValueError(
            f"{what}: out must be a contiguous CPU int64 tensor of {n} elements, got "
            f"{out.dtype} {tuple(out.shape)} on {out.device}"
        )


def _ids(ids: Tensor, what: str) -> Tensor:
    if ids.dtype is torch.int64 and ids.dim() == 1 and ids.device.type == "cpu":
        return ids.contiguous()  # the common case, without the reshape and copy checks
    if ids.dtype is not torch.int64:
        if ids.is_floating_point() or ids.is_complex() or ids.dtype is torch.bool:
            raise TypeError(
                f"{what}: raw ids must be an integer tensor, got dtype {ids.dtype}; cast whole "
                "numbers with .long()"
            )
        ids = ids.to(torch.int64)
    return ids.reshape(-1).to("cpu").contiguous()


class IdSlotMap:
    """Raw int64 id -> slot (`>= 0`) map.

    Args:
        num_buckets: the native hash map's buckets (a power of two > the most ids held).
        backend: `"native"`, `"torch"`, or `"auto"` (native when available).

    All tensors are CPU int64. `insert` takes ids that are absent and distinct (the caller
    finds them first); `find` answers -1 for an absent id.
    """

    def __init__(self, num_buckets: int, *, backend: IdMapBackend = "auto") -> None:
        if num_buckets < 2 or num_buckets & (num_buckets - 1):
            raise ValueError(f"num_buckets must be a power of two >= 2, got {num_buckets}")
        if backend not in ("auto", "native", "torch"):
            raise ValueError(f"backend {backend!r} is not 'auto', 'native' or 'torch'")
        lib = _library() if backend != "torch" else None
        if backend == "native" and lib is None:
            raise RuntimeError(
                "the native id map is unavailable (see NativeUnavailableWarning); use "
                "backend='torch' or 'auto'"
            )
        self.backend: Literal["native", "torch"] = "native" if lib is not None else "torch"
        self.num_buckets = num_buckets
        self._lib = lib
        self._size = 0
        self._buckets = torch.empty(0, 2, dtype=torch.int64)
        self._keys = torch.empty(0, dtype=torch.int64)
        self._slots = torch.empty(0, dtype=torch.int64)
        self.clear()

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        """Forget every id."""
        self._size = 0
        if self.backend == "native":
            # On huge pages: every probe is a random touch of a map of MiBs (memory.py).
            self._buckets = huge_empty(2 * self.num_buckets, torch.int64).view(-1, 2)
            self._buckets[:, 0] = 0
            self._buckets[:, 1] = -1
        else:
            self._keys = torch.empty(0, dtype=torch.int64)
            self._slots = torch.empty(0, dtype=torch.int64)

    def find(self, ids: Tensor, *, out: Tensor | None = None) -> Tensor:
        """`(N,)` slot of each id, -1 where absent (written into `out` when given: a
        contiguous CPU int64 `(N,)` tensor)."""
        ids = _ids(ids, "IdSlotMap.find")
        if out is not None:
            _check_out(out, ids.numel(), "IdSlotMap.find")
        if ids.numel() == 0:
            return torch.empty_like(ids) if out is None else out
        if self._lib is not None:
            out = torch.empty_like(ids) if out is None else out
            b = self._buckets
            self._lib.sr_idmap_find(
                b.data_ptr(), self.num_buckets, ids.data_ptr(), ids.numel(), out.data_ptr()
            )
            return out
        if self._keys.numel() == 0:
            return torch.full_like(ids, -1) if out is None else out.fill_(-1)
        pos = torch.searchsorted(self._keys, ids).clamp_(max=self._keys.numel() - 1)
        hit = self._keys[pos] == ids
        found = torch.where(hit, self._slots[pos], torch.full_like(ids, -1))
        return found if out is None else out.copy_(found)

    def find_touch(
        self, ids: Tensor, last_seen: Tensor | None, counts: Tensor | None, step: int
    ) -> Tensor:
        """`find`, and for each id found `last_seen[slot] = step`, `counts[slot] += 1` (per
        occurrence): the per-slot metadata of a training step, updated in the same pass
        (contiguous CPU int64 tensors indexed by slot; None skips one)."""
        ids = _ids(ids, "IdSlotMap.find_touch")
        if self._lib is None or ids.numel() == 0:
            slots = self.find(ids)
            found = slots[slots >= 0]
            if last_seen is not None:
                last_seen[found] = step
            if counts is not None:
                counts.index_add_(0, found, torch.ones_like(found))
            return slots
        for meta in (last_seen, counts):
            assert meta is None or meta.is_contiguous()
        out = torch.empty_like(ids)
        b = self._buckets
        self._lib.sr_idmap_find_touch(
            b.data_ptr(),
            self.num_buckets,
            ids.data_ptr(),
            ids.numel(),
            out.data_ptr(),
            None if last_seen is None else last_seen.data_ptr(),
            None if counts is None else counts.data_ptr(),
            step,
        )
        return out

    def find_touch_missing(
        self,
        ids: Tensor,
        last_seen: Tensor | None,
        counts: Tensor | None,
        step: int,
        *,
        pending: bool = False,
        out: Tensor | None = None,
        stamps: tuple[Tensor, int] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`find_touch` and `distinct_missing` in one pass: `(slots (N,), uniq (U,),
        occurrences (U,))`, where `slots[i] = -2 - j` marks an occurrence of the missing id
        `uniq[j]` (first-appearance order) until `fill_missing` gives it its slot.

        pending (native, with room for every id: `can_pend`): the missing ids are also
        entered into the map as *pending* entries on the way (no separate dedup set); until
        each is given its slot (`admit_slots` / `replace_slots` / `insert`) or dropped
        (`drop_pending`), the map must not be read otherwise.

        out: where the slots go (a contiguous CPU int64 `(N,)` tensor, e.g. a span of a
        remapped KJT's values: no copy after), else a new tensor.

        stamps (native and pending only; `last_seen` then None): `(bytes (C,) uint8, stamp)`:
        each id found gets `bytes[slot] = stamp` instead of a `last_seen` write
        (`dynamic/stamps.py`)."""
        ids = _ids(ids, "IdSlotMap.find_touch_missing")
        if out is not None:
            _check_out(out, ids.numel(), "IdSlotMap.find_touch_missing")
        if self._lib is None or ids.numel() == 0:
            slots = self.find_touch(ids, last_seen, counts, step)
            uniq, occurrences, inverse = self.distinct_missing(ids, slots)
            missing = slots < 0
            slots[missing] = -2 - inverse[missing]
            return (slots if out is None else out.copy_(slots)), uniq, occurrences
        for meta in (last_seen, counts):
            assert meta is None or meta.is_contiguous()
        n = ids.numel()
        out = torch.empty_like(ids) if out is None else out
        uniq = torch.empty_like(ids)
        occurrences = torch.empty_like(ids)
        if stamps is not None:
            assert last_seen is None and pending and self.can_pend(n)
            marks, stamp = stamps
            return (
                out,
                *self._stamp_pass(ids, out, marks, stamp, counts, uniq, occurrences),
            )
        native = (
            self._lib.sr_idmap_find_touch_pending  # missing ids entered as pending on the way
            if pending and self.can_pend(n)
            else self._lib.sr_idmap_find_touch_missing  # missing ids deduplicated in a scratch set
        )
        u = int(
            native(
                self._buckets.data_ptr(),
                self.num_buckets,
                ids.data_ptr(),
                n,
                out.data_ptr(),
                None if last_seen is None else last_seen.data_ptr(),
                None if counts is None else counts.data_ptr(),
                step,
                uniq.data_ptr(),
                occurrences.data_ptr(),
            )
        )
        if u < 0:
            raise MemoryError(f"IdSlotMap.find_touch_missing: no memory for {n} ids' scratch set")
        return out, uniq[:u], occurrences[:u]

    def _stamp_pass(
        self,
        ids: Tensor,
        out: Tensor,
        marks: Tensor,
        stamp: int,
        counts: Tensor | None,
        uniq: Tensor,
        occurrences: Tensor,
    ) -> tuple[Tensor, Tensor]:
        assert self._lib is not None and marks.dtype is torch.uint8 and marks.is_contiguous()
        u = int(
            self._lib.sr_idmap_find_stamp_pending(
                self._buckets.data_ptr(),
                self.num_buckets,
                ids.data_ptr(),
                ids.numel(),
                out.data_ptr(),
                marks.data_ptr(),
                stamp,
                None if counts is None else counts.data_ptr(),
                uniq.data_ptr(),
                occurrences.data_ptr(),
            )
        )
        return uniq[:u], occurrences[:u]

    def can_pend(self, n: int) -> bool:
        """Whether `find_touch_missing(pending=True)` of `n` ids enters them as pending: the
        native map with room for all of them beside the ids it holds."""
        return self._lib is not None and self._size + n < self.num_buckets

    def drop_pending(self, ids: Tensor) -> None:
        """Remove the pending entries of `ids` (`find_touch_missing(pending=True)`) that were
        not given a slot; ids with a slot, or absent, are left alone."""
        ids = _ids(ids, "IdSlotMap.drop_pending")
        if self._lib is not None and ids.numel():
            self._lib.sr_idmap_drop_pending(
                self._buckets.data_ptr(), self.num_buckets, ids.data_ptr(), ids.numel()
            )

    def fill_missing(self, slots: Tensor, slot_of: Tensor) -> int:
        """In place: each mark `-2 - j` of `find_touch_missing` in `slots` becomes `slot_of[j]`
        (-1 for an id left without a slot). Returns the number of -1 written."""
        slot_of = slot_of.reshape(-1).to(torch.int64).contiguous()
        if self._lib is None or not slots.is_contiguous():
            marked = slots <= -2
            filled = slot_of[-2 - slots[marked]]
            slots[marked] = filled
            return int((filled < 0).sum())
        return int(
            self._lib.sr_idmap_fill_missing(slots.data_ptr(), slots.numel(), slot_of.data_ptr())
        )

    def insert(self, ids: Tensor, slots: Tensor) -> None:
        """Add `ids[i] -> slots[i]`; the ids must be absent and distinct, the slots >= 0."""
        ids = _ids(ids, "IdSlotMap.insert")
        slots = slots.reshape(-1).to(torch.int64).contiguous()
        if ids.numel() != slots.numel():
            raise ValueError(f"{ids.numel()} ids but {slots.numel()} slots")
        if ids.numel() == 0:
            return
        if self._size + ids.numel() >= self.num_buckets:
            raise ValueError(
                f"IdSlotMap with {self.num_buckets} buckets cannot hold {self._size} + "
                f"{ids.numel()} ids; build it with more buckets"
            )
        if self._lib is not None:
            b = self._buckets
            done = self._lib.sr_idmap_insert(
                b.data_ptr(), self.num_buckets, ids.data_ptr(), slots.data_ptr(), ids.numel()
            )
            if done != ids.numel():
                bad = int(ids[-done - 1])
                raise ValueError(f"IdSlotMap.insert: id {bad} is already present")
        else:
            keys = torch.cat([self._keys, ids])
            values = torch.cat([self._slots, slots])
            keys, order = torch.sort(keys, stable=True)
            if keys.numel() > 1 and bool((keys[1:] == keys[:-1]).any()):
                dup = int(keys[1:][keys[1:] == keys[:-1]][0])
                raise ValueError(f"IdSlotMap.insert: id {dup} is already present")
            self._keys, self._slots = keys, values[order]
        self._size += ids.numel()

    def free_slots(
        self,
        slots: Tensor,
        meta: tuple[Tensor, Tensor, Tensor, Tensor],
        *,
        stamps: Tensor | None = None,
    ) -> None:
        """Native only: each of `slots` (occupied) loses its id from the map, and its
        `(slot_ids, occupied, last_seen, counts)` entries are zeroed, in one pass (and its
        byte of `stamps`, when given: `dynamic/stamps.py`; so in `admit_slots` and
        `replace_slots`)."""
        assert self._lib is not None
        slots = slots.contiguous()
        removed = int(
            self._lib.sr_idmap_free_slots(
                self._buckets.data_ptr(),
                self.num_buckets,
                slots.data_ptr(),
                slots.numel(),
                *(t.data_ptr() for t in meta),
                None if stamps is None else stamps.data_ptr(),
            )
        )
        self._size -= removed

    def admit_slots(
        self,
        ids: Tensor,
        slots: Tensor,
        occurrences: Tensor,
        step: int,
        meta: tuple[Tensor, Tensor, Tensor, Tensor],
        *,
        stamps: Tensor | None = None,
    ) -> None:
        """Native only: `insert(ids, slots)`, and each slot's `(slot_ids, occupied, last_seen,
        counts)` become `(id, True, step, occurrences)`, in one pass."""
        assert self._lib is not None
        ids, slots = ids.contiguous(), slots.contiguous()
        occurrences = occurrences.contiguous()
        if self._size + ids.numel() >= self.num_buckets:
            raise ValueError(
                f"IdSlotMap with {self.num_buckets} buckets cannot hold {self._size} + "
                f"{ids.numel()} ids; build it with more buckets"
            )
        done = int(
            self._lib.sr_idmap_admit_slots(
                self._buckets.data_ptr(),
                self.num_buckets,
                ids.data_ptr(),
                slots.data_ptr(),
                occurrences.data_ptr(),
                ids.numel(),
                step,
                *(t.data_ptr() for t in meta),
                None if stamps is None else stamps.data_ptr(),
            )
        )
        if done != ids.numel():
            raise ValueError(f"IdSlotMap.admit_slots: id {int(ids[-done - 1])} is already present")
        self._size += done

    def replace_slots(
        self,
        slots: Tensor,
        ids: Tensor,
        occurrences: Tensor,
        step: int,
        meta: tuple[Tensor, Tensor, Tensor, Tensor],
        *,
        stamps: Tensor | None = None,
    ) -> None:
        """Native only: `free_slots(slots)` then `admit_slots(ids, slots, ...)` in one call (each
        of the occupied `slots` loses its id and takes `ids[i]`; the map size is unchanged)."""
        assert self._lib is not None
        slots, ids = slots.contiguous(), ids.contiguous()
        occurrences = occurrences.contiguous()
        done = int(
            self._lib.sr_idmap_replace_slots(
                self._buckets.data_ptr(),
                self.num_buckets,
                slots.data_ptr(),
                ids.data_ptr(),
                occurrences.data_ptr(),
                ids.numel(),
                step,
                *(t.data_ptr() for t in meta),
                None if stamps is None else stamps.data_ptr(),
            )
        )
        if done != ids.numel():
            raise ValueError(
                f"IdSlotMap.replace_slots: id {int(ids[-done - 1])} is already present"
            )

    def erase(self, ids: Tensor) -> int:
        """Remove `ids` (absent ones are skipped); returns how many were removed."""
        ids = _ids(ids, "IdSlotMap.erase")
        if ids.numel() == 0 or self._size == 0:
            return 0
        if self._lib is not None:
            b = self._buckets
            removed = int(
                self._lib.sr_idmap_erase(
                    b.data_ptr(), self.num_buckets, ids.data_ptr(), ids.numel()
                )
            )
        else:
            keep = ~torch.isin(self._keys, ids)
            removed = int(self._keys.numel() - int(keep.sum()))
            self._keys, self._slots = self._keys[keep], self._slots[keep]
        self._size -= removed
        return removed

    def distinct_missing(self, ids: Tensor, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The ids whose `slots` (from `find`) are -1, deduplicated in order of first
        appearance: `(uniq (U,), counts (U,), inverse (N,))`, where `inverse[i]` is the index in
        `uniq` of `ids[i]` for each missing position (-1 elsewhere). Same answer on both
        backends (native: one pass with a scratch hash set; torch: `unique` + a sort)."""
        ids = _ids(ids, "IdSlotMap.distinct_missing")
        slots = slots.reshape(-1).to(torch.int64).contiguous()
        missing = slots < 0
        n_missing = int(missing.sum())
        inverse = torch.full_like(ids, -1)
        if n_missing == 0:
            empty = ids.new_empty(0)
            return empty, empty, inverse
        if self._lib is not None:
            cap = 1 << (2 * n_missing).bit_length()
            scratch = torch.empty(cap, 2, dtype=torch.int64)
            uniq = torch.empty(n_missing, dtype=torch.int64)
            counts = torch.empty(n_missing, dtype=torch.int64)
            u = int(
                self._lib.sr_idmap_distinct_missing(
                    ids.data_ptr(),
                    slots.data_ptr(),
                    ids.numel(),
                    scratch.data_ptr(),
                    cap,
                    uniq.data_ptr(),
                    counts.data_ptr(),
                    inverse.data_ptr(),
                )
            )
            return uniq[:u], counts[:u], inverse
        where = torch.nonzero(missing).reshape(-1)
        uniq, inv, counts = torch.unique(ids[where], return_inverse=True, return_counts=True)
        first = torch.full_like(uniq, n_missing).scatter_reduce_(
            0, inv, torch.arange(n_missing), "amin"
        )
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel())
        inverse[where] = rank[inv]
        return uniq[order], counts[order], inverse

    def items(self) -> tuple[Tensor, Tensor]:
        """`(ids, slots)` of every entry, ordered by slot (the same for both backends)."""
        if self._lib is not None:
            used = self._buckets[:, 1] >= 0
            keys, slots = self._buckets[used, 0], self._buckets[used, 1]
        else:
            keys, slots = self._keys, self._slots
        slots, order = torch.sort(slots)
        return keys[order], slots
