"""The admission / eviction round of `MCHManagedCollisionModule` over its sorted slots.

Training: every forward appends its ids to a window (`_history_accumulator`, sized at the first
non-empty batch: 1.25 x its ids x `eviction_interval`; ids past its end are not counted, as
TorchRec). Every `eviction_interval` forwards the window's distinct ids compete with the held
ids under the eviction policy (`mc.policies`); winners take the losers' rows and `evict()`
reports those rows. The round's writes go through the native passes of `mc.round_native`, and
the slots' hash index (`mc.sorted_index`) follows them, where it is ready.

`MCHRound` is a mixin of `MCHManagedCollisionModule` (mc/mch.py): it owns the methods that
change the slots, the module owns the buffers, the interface and the lookup.
"""

import dataclasses

import torch

from shardrec_embedding.mc.policies import MCHEvictionPolicy
from shardrec_embedding.mc.round_native import (
    apply_round,
    coalesce_window,
    coalesce_window_inverse,
    gather,
    match_slots,
    merge_slots_,
    order_by_count,
)
from shardrec_embedding.mc.sorted_index import SortedSlotIndex, permute_

__all__ = ["MCHRound", "MCHStats"]

_INT64_MAX = torch.iinfo(torch.int64).max


@dataclasses.dataclass(kw_only=True)
class MCHStats:
    """Counters of the eviction rounds since construction (`module.stats`)."""

    rounds: int = 0
    admissions: int = 0  # new ids that took a row
    evictions: int = 0  # held ids that lost their row to a new id


class MCHRound:
    """The window and the round of an `MCHManagedCollisionModule` (its state, declared here)."""

    _mch_sorted_raw_ids: torch.Tensor
    _mch_remapped_ids_mapping: torch.Tensor
    _mch_metadata: dict[str, torch.Tensor]
    _delimiter: torch.Tensor
    _history_metadata: dict[str, torch.Tensor]
    _history_accumulator: torch.Tensor
    _input_history_buffer_size: int
    _current_history_buffer_offset: int
    _current_iter: int
    _zch_size: int
    _output_global_offset: int
    _eviction_policy: MCHEvictionPolicy
    _index: SortedSlotIndex | None
    _evicted: bool
    _evicted_emb_indices: torch.Tensor
    _pending_rows: list[torch.Tensor]
    # {feature: (its ids, their rows)} found by this forward's round, for remap
    _round_rows: dict[str, tuple[torch.Tensor, torch.Tensor]]
    _round_stamp: tuple[int, int]
    stats: MCHStats

    def _state_stamp(self) -> tuple[int, int]:
        """Version counters of the slot buffers: round rows are used only while unchanged."""
        return (self._mch_sorted_raw_ids._version, self._mch_remapped_ids_mapping._version)

    def _ready_index(self) -> SortedSlotIndex | None:
        """The hash index of the slots when it can answer for the search (native map, CPU,
        not tracing), else None."""
        if self._index is None or torch.fx._symbolic_trace.is_fx_symbolic_tracing():
            return None
        if not self._index.ready(self._mch_sorted_raw_ids, self._mch_remapped_ids_mapping):
            return None
        return self._index

    def _record(self, values: torch.Tensor) -> None:
        start = self._current_history_buffer_offset
        values = values[: self._input_history_buffer_size - start]
        end = start + values.numel()
        self._history_accumulator[start:end] = values
        self._eviction_policy.record_history_metadata(
            self._current_iter,
            values,
            {name: buffer[start:end] for name, buffer in self._history_metadata.items()},
        )
        self._current_history_buffer_offset = end

    @torch.no_grad()
    def _coalesce_history(
        self, spans: dict[str, tuple[torch.Tensor, int, int]] | None = None
    ) -> None:
        used = self._current_history_buffer_offset
        threshold_filter = self._eviction_policy._threshold_filtering_func
        if self._base_coalesce():
            # the base policy's window metadata is the max of `last_access_iter` per id: one
            # native pass (sort, counts, max) instead of `unique` + `scatter_reduce`
            last_window = self._history_metadata.get("last_access_iter")
            window = self._history_accumulator[:used]
            meta = None if last_window is None else last_window[:used]
            inverse = None
            if spans and self._index is not None and threshold_filter is None:
                # with each window entry's distinct id, the round also finds this forward's
                # rows (remap then reads no index)
                uniq_ids, counts, last, inverse = coalesce_window_inverse(window, meta)
            else:
                uniq_ids, counts, last = coalesce_window(window, meta)
            mask = threshold_filter(counts)[0] if threshold_filter is not None else None
            metadata = {}
            if last is not None:
                metadata["last_access_iter"] = last if mask is None else last[mask]
            if mask is not None:
                uniq_ids, counts = uniq_ids[mask], counts[mask]
            uniq_rows = self._update_and_evict(uniq_ids, counts, metadata, inverse is not None)
            if uniq_rows is not None and inverse is not None and spans:
                self._round_rows = {
                    name: (values, gather(uniq_rows, inverse[start:end]))
                    for name, (values, start, end) in spans.items()
                }
                self._round_stamp = self._state_stamp()
            self._current_history_buffer_offset = 0
            return
        uniq_ids, inverse, counts = torch.unique(
            self._history_accumulator[:used], return_inverse=True, return_counts=True
        )
        mask = threshold_filter(counts)[0] if threshold_filter is not None else None
        metadata = self._eviction_policy.coalesce_history_metadata(
            self._current_iter,
            {name: buffer[:used] for name, buffer in self._history_metadata.items()},
            counts,
            inverse,
            threshold_mask=mask,
        )
        if mask is not None:
            uniq_ids, counts = uniq_ids[mask], counts[mask]
        self._update_and_evict(uniq_ids, counts, metadata)
        self._current_history_buffer_offset = 0

    def _base_coalesce(self) -> bool:
        """True when the policy coalesces its window by the base rule (max `last_access_iter`
        per id, nothing else), which the native pass reproduces."""
        policy = type(self._eviction_policy)
        return policy.coalesce_history_metadata is MCHEvictionPolicy.coalesce_history_metadata and (
            set(self._history_metadata) <= {"last_access_iter"}
        )

    @torch.no_grad()
    def _update_and_evict(
        self,
        uniq_ids: torch.Tensor,
        uniq_ids_counts: torch.Tensor,
        uniq_ids_metadata: dict[str, torch.Tensor],
        want_rows: bool = False,
    ) -> torch.Tensor | None:
        """The round. With `want_rows` (and the index), returns the row each of `uniq_ids`
        reads after it (the miss row for ids without a slot), else None."""
        by_count = order_by_count(uniq_ids_counts)
        index = self._ready_index()
        # the index certifies the slots sorted and distinct: then one merge of the sorted
        # window ids with the slots answers the search
        matched = (
            None if index is None else match_slots(self._mch_sorted_raw_ids, uniq_ids, by_count)
        )
        if matched is not None:
            ids, held, held_slots = matched
        elif index is not None:
            ids = uniq_ids[by_count]
            rows_of = index.rows(ids)
            held = rows_of >= 0
            held_slots = index.slots(rows_of[held], self._mch_remapped_ids_mapping)
        else:
            ids = uniq_ids[by_count]
            slot = torch.searchsorted(self._mch_sorted_raw_ids[:-1], ids)
            held = self._mch_sorted_raw_ids[slot] == ids
            held_slots = slot[held]
        evicted, selected = self._eviction_policy.update_metadata_and_generate_eviction_scores(
            self._current_iter,
            self._zch_size,
            by_count,
            gather(uniq_ids_counts, by_count),
            held,
            held_slots,
            self._mch_metadata,
            uniq_ids_metadata,
        )
        self.stats.rounds += 1
        self.stats.admissions += int(evicted.numel())
        miss = self._output_global_offset + self._zch_size - 1
        applied = None
        if index is not None:  # the round's writes in one native pass
            applied = apply_round(
                self._mch_sorted_raw_ids,
                self._mch_remapped_ids_mapping,
                uniq_ids,
                by_count,
                held,
                held_slots,
                evicted,
                selected,
                miss if want_rows else None,
            )
        uniq_rows = None
        if index is not None and applied is not None:
            rows, uniq_rows = applied.rows, applied.uniq_rows
            self.stats.evictions += applied.evictions
            self._resort_indexed(
                index, evicted, applied.by_key, applied.old_ids, applied.new_ids, rows
            )
            if uniq_rows is not None and int(uniq_ids[-1]) == _INT64_MAX:
                # int64 max reads the row of the first empty slot of the new state
                uniq_rows[-1] = self._row_of_max()
        else:
            old_ids = self._mch_sorted_raw_ids[evicted]
            self.stats.evictions += int((old_ids != _INT64_MAX).sum())
            rows = self._mch_remapped_ids_mapping[evicted]
            if index is not None and evicted.numel() == 0:
                # nothing new: the sorted slots and the index stand as they are
                if want_rows:
                    held_rows = self._mch_remapped_ids_mapping[held_slots]
                    uniq_rows = torch.full((uniq_ids.numel(),), miss, dtype=torch.int64)
                    uniq_rows[by_count[held]] = held_rows
            elif index is not None:
                new_at = by_count[~held][selected]  # the new ids' places among uniq_ids
                new_ids = uniq_ids[new_at]
                self._mch_sorted_raw_ids[evicted] = new_ids
                # the freed slots in the order of their new ids, by those places (no sort)
                slot_of = torch.full((uniq_ids.numel(),), -1, dtype=torch.int64)
                slot_of[new_at] = evicted
                by_key = slot_of[slot_of >= 0]
                self._resort_indexed(index, evicted, by_key, old_ids, new_ids, rows)
            else:
                self._mch_sorted_raw_ids[evicted] = ids[~held][selected]
                self._sort_mch_buffers()
        if self._evicted:  # rows of an earlier round not yet consumed by evict()
            self._pending_rows.append(rows)
            if len(self._pending_rows) >= 8:
                self._merge_pending_rows()
        else:
            self._evicted_emb_indices = rows
            self._pending_rows = []
        self._evicted = True
        return uniq_rows

    def _resort_indexed(
        self,
        index: SortedSlotIndex,
        evicted: torch.Tensor,
        by_key: torch.Tensor,
        old_ids: torch.Tensor,
        new_ids: torch.Tensor,
        rows: torch.Tensor,
    ) -> None:
        """After new ids went into slots `evicted` (`by_key`: those slots in the order of
        their new ids), sort the buffers again and move the index along."""
        # held ids stay sorted: merge the new ones in (the same order as a stable argsort)
        others = [self._mch_remapped_ids_mapping, *self._mch_metadata.values()]
        # the slots' positions are not kept (the round matches ids by a merge): they go
        # stale, and the index refreshes them if a search by row needs them
        if merge_slots_(
            self._mch_sorted_raw_ids, others, evicted, index.offset, None, by_key=by_key
        ):
            index.position_stale = True
        else:
            self._sort_mch_buffers(
                index.reorder(self._mch_sorted_raw_ids, self._mch_remapped_ids_mapping, evicted)
            )
        index.defer_update(
            self._mch_sorted_raw_ids, self._mch_remapped_ids_mapping, old_ids, new_ids, rows
        )

    def _row_of_max(self) -> int:
        """The row `searchsorted` finds for the raw id int64 max: the first empty slot's (or
        the last slot's)."""
        at = torch.searchsorted(self._mch_sorted_raw_ids[:-1], self._delimiter)
        return int(self._mch_remapped_ids_mapping[at])

    def _merge_pending_rows(self) -> None:
        """`_evicted_emb_indices` becomes `torch.unique` of it and the pending rows (by a mask
        of this module's rows: linear, where `unique` sorts)."""
        if not self._pending_rows:
            return
        both = torch.cat([self._evicted_emb_indices, *self._pending_rows])
        self._pending_rows = []
        start = self._output_global_offset
        if both.numel() and (int(both.min()) < start or int(both.max()) >= start + self._zch_size):
            self._evicted_emb_indices = torch.unique(both)
            return
        mask = torch.zeros(self._zch_size, dtype=torch.bool, device=both.device)
        mask[both - start] = True
        self._evicted_emb_indices = torch.nonzero(mask).reshape(-1) + start

    @torch.no_grad()
    def _sort_mch_buffers(self, order: torch.Tensor | None = None) -> None:
        if order is None:
            order = torch.argsort(self._mch_sorted_raw_ids, stable=True)
        else:
            buffers = [
                self._mch_sorted_raw_ids,
                self._mch_remapped_ids_mapping,
                *self._mch_metadata.values(),
            ]
            if permute_(buffers, order):
                return
        self._mch_sorted_raw_ids.copy_(self._mch_sorted_raw_ids[order])
        self._mch_remapped_ids_mapping.copy_(self._mch_remapped_ids_mapping[order])
        for buffer in self._mch_metadata.values():
            buffer.copy_(buffer[order])
