"""`SortedSlotIndex`: a hash index over `MCHManagedCollisionModule`'s sorted slots.

The module's state stays TorchRec's: `_mch_sorted_raw_ids` (sorted raw ids, int64 max =
empty) and `_mch_remapped_ids_mapping` (the row of each slot). Answering "which row holds raw
id x" by `searchsorted` costs a binary search (about 17 cache misses at 100k slots) per id;
this index answers it with one hash probe (`IdSlotMap`: raw id -> row) and keeps
`position[row]`, the slot of each row, so an eviction round finds held ids' slots without a
search too. It is derived state, never saved: it is rebuilt whenever either buffer was
replaced or written by anyone else (a tensor's version counter says so), and it answers
exactly what the search answers, including for the raw id int64 max (it reads the row of the
first empty slot, as the search finds).

After a round that wrote new ids into slots `evicted`, `reorder` gives the permutation a
stable `argsort` of the raw ids would give (held ids are still sorted; only the new ones need
sorting and merging in), and `update` moves the index to the new state.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_embedding.dynamic.id_map import IdSlotMap, _library, idmap_native_available
from shardrec_embedding.mc.round_native import argsort_subset

__all__ = ["SortedSlotIndex", "permute_"]

_INT64_MAX = torch.iinfo(torch.int64).max


class SortedSlotIndex:
    """raw id -> row of one MCH module's `zch_size` slots whose rows start at `offset`."""

    def __init__(self, zch_size: int, offset: int) -> None:
        self.zch_size = zch_size
        self.offset = offset
        buckets = 1 << max(1, (2 * zch_size + 1).bit_length())
        self.map = IdSlotMap(buckets)
        self.position = torch.empty(zch_size, dtype=torch.int64)
        self.position_stale = False  # `position` no longer follows the buffers (see slots)
        self._stamp: tuple[Tensor, int, Tensor, int] | None = None
        self._usable = False
        # rounds not yet applied to `map` (see defer_update); past zch_size ids: rebuild
        self._pending: list[tuple[Tensor, Tensor, Tensor]] = []
        self._pending_ids = 0
        self._rebuild_due = False

    def __getstate__(self) -> dict[str, int]:
        # Derived state: a copy (deepcopy, pickle) starts empty and rebuilds on first use.
        return {"zch_size": self.zch_size, "offset": self.offset}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["zch_size"], state["offset"])  # type: ignore[misc]

    @staticmethod
    def worthwhile() -> bool:
        """Only the native map beats the sorted search (the torch one is a search itself)."""
        return idmap_native_available()

    def ready(self, sorted_ids: Tensor, mapping: Tensor) -> bool:
        """True when the index matches the buffers (rebuilding it if they changed); False
        when they cannot be indexed (not on the CPU, or not a sorted, distinct state): the
        caller then searches."""
        stamp = self._stamp
        if (
            stamp is not None
            and stamp[0] is sorted_ids
            and stamp[1] == sorted_ids._version
            and stamp[2] is mapping
            and stamp[3] == mapping._version
        ):
            return self._usable
        self._usable = self._rebuild(sorted_ids, mapping)
        self._mark(sorted_ids, mapping)
        return self._usable

    def rows(self, ids: Tensor) -> Tensor:
        """`(N,)` int64 row of each raw id, -1 where no slot holds it."""
        self._apply_pending()
        return self.map.find(ids)

    def slots(self, rows: Tensor, mapping: Tensor) -> Tensor:
        """The slot (index in the sorted buffers) of each of `rows` (held rows); `mapping`
        is the module's row of each slot (to refresh `position` after a round that left it
        stale)."""
        if self.position_stale:
            self.position[mapping - self.offset] = torch.arange(self.zch_size)
            self.position_stale = False
        return self.position[rows - self.offset]

    def reorder(self, sorted_ids: Tensor, mapping: Tensor, evicted: Tensor) -> Tensor:
        """`torch.argsort(sorted_ids, stable=True)` after new ids (distinct, absent before,
        not int64 max) were written into slots `evicted` of an otherwise sorted array (the
        held ids stay sorted: one merge of the sorted new ids into them). Also moves
        `position` to the slots the rows will have once the buffers follow that order."""
        z = sorted_ids.numel()
        fresh = torch.zeros(z, dtype=torch.bool)
        fresh[evicted] = True
        by_key = argsort_subset(sorted_ids, evicted, descending=False)
        order = torch.empty(z, dtype=torch.int64)
        lib = _library()
        assert lib is not None  # the index exists only with the native map
        lib.sr_idmap_merge_order(
            sorted_ids.data_ptr(),
            z,
            by_key.data_ptr(),
            by_key.numel(),
            fresh.data_ptr(),
            mapping.data_ptr(),
            self.offset,
            order.data_ptr(),
            self.position.data_ptr(),
        )
        self.position_stale = False
        return order

    def update(
        self, sorted_ids: Tensor, mapping: Tensor, old_ids: Tensor, new_ids: Tensor, rows: Tensor
    ) -> None:
        """The round replaced `old_ids` (int64 max for empty slots) by `new_ids` at `rows`,
        and the buffers were re-sorted in the `reorder` order: follow."""
        self._apply_pending()
        self.map.erase(old_ids)
        self.map.erase(torch.tensor([_INT64_MAX]))
        self.map.insert(new_ids, rows)
        self._index_max(sorted_ids, mapping)
        self._mark(sorted_ids, mapping)

    def defer_update(
        self, sorted_ids: Tensor, mapping: Tensor, old_ids: Tensor, new_ids: Tensor, rows: Tensor
    ) -> None:
        """`update`, applied only when the map is next read (`rows`): a module whose every
        training forward runs a round remaps from the round itself and never reads the map,
        so its rounds cost no map upkeep. Rounds past `zch_size` new ids in all are dropped
        for one rebuild from the buffers instead."""
        if not self._rebuild_due:
            self._pending.append((old_ids, new_ids, rows))
            self._pending_ids += int(new_ids.numel())
            if self._pending_ids > self.zch_size:
                self._pending, self._pending_ids, self._rebuild_due = [], 0, True
        self._mark(sorted_ids, mapping)

    def _apply_pending(self) -> None:
        stamp = self._stamp
        if stamp is None or not (self._pending or self._rebuild_due):
            return
        sorted_ids, mapping = stamp[0], stamp[2]
        if self._rebuild_due:
            self._usable = self._rebuild(sorted_ids, mapping)
            return
        pending, self._pending, self._pending_ids = self._pending, [], 0
        for old_ids, new_ids, rows in pending:  # in order: a later round may free an id
            self.map.erase(old_ids)
            self.map.insert(new_ids, rows)
        self.map.erase(torch.tensor([_INT64_MAX]))  # (new ids are never int64 max)
        self._index_max(sorted_ids, mapping)

    def _mark(self, sorted_ids: Tensor, mapping: Tensor) -> None:
        self._stamp = (sorted_ids, sorted_ids._version, mapping, mapping._version)

    def _index_max(self, sorted_ids: Tensor, mapping: Tensor) -> None:
        # The search over all slots but the last finds the first empty slot for int64 max (or
        # the last slot, itself empty): its row is what that id reads.
        first = torch.searchsorted(sorted_ids[:-1], torch.tensor([_INT64_MAX]))
        self.map.insert(torch.tensor([_INT64_MAX]), mapping[first])

    def _rebuild(self, sorted_ids: Tensor, mapping: Tensor) -> bool:
        self._pending, self._pending_ids, self._rebuild_due = [], 0, False
        self.map.clear()
        z = self.zch_size
        if (
            sorted_ids.device.type != "cpu"
            or mapping.device.type != "cpu"
            or sorted_ids.shape != (z,)
            or mapping.shape != (z,)
            or int(sorted_ids[-1]) != _INT64_MAX
        ):
            return False
        ids = sorted_ids.to(torch.int64)
        step_up = (ids[1:] > ids[:-1]) | (ids[1:] == _INT64_MAX)
        if not bool(step_up.all()) or bool((ids[1:] < ids[:-1]).any()):
            return False  # not sorted, or a raw id held twice
        rows = mapping.to(torch.int64) - self.offset
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= z):
            return False
        self.position.fill_(-1)
        self.position[rows] = torch.arange(z)
        self.position_stale = False
        if bool((self.position < 0).any()):
            return False  # two slots share a row
        held = ids[:-1] != _INT64_MAX
        self.map.insert(ids[:-1][held], mapping[:-1][held].to(torch.int64))
        self._index_max(ids, mapping.to(torch.int64))
        return True


def permute_(buffers: list[Tensor], order: Tensor) -> bool:
    """`b.copy_(b[order])` for each buffer, natively in one scratch; False (nothing done)
    when one is not a contiguous CPU int64 vector of `order`'s length or the kernels are off."""
    lib = _library()
    n = order.numel()
    if lib is None or not all(
        b.dtype is torch.int64 and b.device.type == "cpu" and b.is_contiguous() and b.numel() == n
        for b in buffers
    ):
        return False
    order = order.contiguous()
    scratch = torch.empty(n, dtype=torch.int64)
    for b in buffers:
        lib.sr_idmap_permute(b.data_ptr(), order.data_ptr(), n, scratch.data_ptr())
        torch.autograd.graph.increment_version(b)  # written through a pointer
    return True
