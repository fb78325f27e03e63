"""`DynamicTable`: the id -> slot state of one raw-id table, with admission and eviction.

Slot-level state lives in flat buffers (checkpointed with the module's `state_dict`):

```
slot_ids   (C,) int64  raw id owning each slot          occupied (C,) bool
last_seen  (C,) int64  training step it was last seen    counts   (C,) int64 sightings
           (kept up to date as the policy needs: last_seen for LRU / LFU / TTL, counts for LFU)
free_slots (C,) int64  stack of freed slots (first `n_free` entries)
sketch     (2, W) int64  count-min sketch of not-yet-admitted ids (THRESHOLD only)
default_row (D,) float32 what unknown ids read in evaluation (UnknownIdPolicy.DEFAULT_ROW)
```

plus scalar counters (`get_extra_state`). A native LRU / LFU table's training steps touch a
byte per slot instead of `last_seen` (`stamps.py`), folded into `last_seen` before it is read
(the attribute is a property that does it) or saved. The `IdSlotMap` index is rebuilt from
`slot_ids` / `occupied` after a load, so its layout never has to be saved.

One training call (`map_ids(ids, training=True)`) is one step `s`:

1. find every id; found ids get `last_seen = s`, `counts += 1` per sighting;
2. the distinct missing ids, in order of first appearance, go through admission;
3. TTL: a sweep of `scan_per_step` slots frees rows unseen for more than `ttl_steps` steps;
4. when the admitted ids need more slots than are free, the eviction policy frees slots not
   seen in this step (scanning windows of at least `scan_per_step` slots from a cursor);
5. admitted ids take the most recently freed slots first (the top of the free stack, in stack
   order), then never-used slots in increasing order; ids beyond the free slots are rejected.

A freed slot's row and optimizer state are reset by the reset hooks the owning collection
registered (`add_reset_hook`), so a new id never inherits another's vector or momentum.

A step can be taken back: `start_undo()` before it records what it changes, `rollback_step()`
returns the table to exactly its state before it, `commit_step()` keeps it (`undo.py`; a
sharded collection does this when an owner's map fails on any rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from shardrec_embedding.dynamic.config import AdmissionPolicy, DynamicTableConfig, EvictionPolicy
from shardrec_embedding.dynamic.eviction import EVICTION_SAMPLE, evict_for, ttl_sweep
from shardrec_embedding.dynamic.hashing import mix64, uniform01
from shardrec_embedding.dynamic.id_map import IdMapBackend, IdSlotMap
from shardrec_embedding.dynamic.in_flight import InFlightSlots
from shardrec_embedding.dynamic.stamps import RecentStamps
from shardrec_embedding.dynamic.undo import StepUndo

__all__ = ["COUNTERS", "EVICTION_SAMPLE", "DynamicTable", "ResetHook"]

ResetHook = Callable[[Tensor], None]
"""Called with the `(k,)` int64 slots just freed: reset their rows / optimizer state."""

COUNTERS = (
    "steps",
    "admissions",
    "rejections",
    "evictions",
    "unknown_reads",
    "high_water",
    "n_free",
    "evict_cursor",
    "ttl_cursor",
)
"""Scalar state (`get_extra_state`)."""

_SKETCH_SALTS = (0x243F6A8885A308D3, 0x13198A2E03707344)


class DynamicTable(nn.Module):
    """The id map, policy metadata and counters of one raw-id table of `capacity` slots.

    Args:
        name: the table's name (in messages).
        config: its `DynamicTableConfig` (validated by the table config).
        capacity: slots (the table's `num_embeddings`).
        dim: the row width (for `default_row`).
        backend: the id map's backend (`IdSlotMap`).
    """

    slot_ids: Tensor
    occupied: Tensor
    counts: Tensor
    free_slots: Tensor
    sketch: Tensor
    default_row: Tensor

    def __init__(
        self,
        name: str,
        config: DynamicTableConfig,
        capacity: int,
        dim: int,
        *,
        backend: IdMapBackend = "auto",
    ) -> None:
        super().__init__()
        self.name = name
        self.config = config
        self.capacity = capacity
        self.map = IdSlotMap(config.num_buckets(capacity), backend=backend)
        # LRU / LFU on the native map: the find pass's touch as a byte per slot (stamps.py);
        # TTL reads last_seen every step (its sweep), so it keeps the direct touch
        self._recent = (
            RecentStamps(capacity)
            if self.map.backend == "native"
            and config.eviction in (EvictionPolicy.LRU, EvictionPolicy.LFU)
            else None
        )
        self.register_buffer("slot_ids", torch.zeros(capacity, dtype=torch.int64))
        self.register_buffer("occupied", torch.zeros(capacity, dtype=torch.bool))
        self.register_buffer("last_seen", torch.zeros(capacity, dtype=torch.int64))
        self.register_buffer("counts", torch.zeros(capacity, dtype=torch.int64))
        self.register_buffer("free_slots", torch.zeros(capacity, dtype=torch.int64))
        width = (
            config.sketch_cells(capacity) if config.admission is AdmissionPolicy.THRESHOLD else 0
        )
        self.register_buffer("sketch", torch.zeros(2 if width else 0, width, dtype=torch.int64))
        self.register_buffer("default_row", torch.zeros(dim, dtype=torch.float32))
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._map_stale = False
        self._reset_hooks: list[ResetHook] = []
        self._undo: StepUndo | None = None  # the current step's undo record (undo.py)
        # Slots of batches whose backward has not run: deferred resets, holds (in_flight.py).
        self.in_flight = InFlightSlots(self._run_reset_hooks, lambda: self._counters["steps"])
        self.register_state_dict_pre_hook(_flush_before_save)  # type: ignore[no-untyped-call]  # untyped in torch's stubs

    @property
    def last_seen(self) -> Tensor:
        """`(C,)` int64: the training step each slot was last seen (a buffer; the steps'
        stamps folded in first: `stamps.py`)."""
        buffer = self._buffers.get("last_seen")
        if buffer is None:  # not registered yet (nn.Module's checks while __init__ runs)
            raise AttributeError("last_seen")
        recent = self.__dict__.get("_recent")
        if recent is not None and recent.dirty:
            undo = self.__dict__.get("_undo")
            if undo is not None and undo.started and undo.last_seen is None:
                # the sync folds in this step's touches
                undo.last_seen = undo.copy("last_seen_before", buffer)
            recent.sync(buffer)
        return buffer

    def _last_seen_unsynced(self) -> Tensor:
        """The `last_seen` buffer as it is (the find pass's stamps not folded in)."""
        buffer = self._buffers["last_seen"]
        assert buffer is not None
        return buffer

    # ---- public API -------------------------------------------------------------------------

    def add_reset_hook(self, hook: ResetHook) -> None:
        """Run `hook(slots)` whenever slots are freed (evicted, expired, or `evict`ed)."""
        self._reset_hooks.append(hook)

    def map_ids(self, ids: Tensor, *, training: bool) -> Tensor:
        """`(N,)` int64 slot per raw id, -1 for an id without a slot.

        training: admit and insert new ids, update the policy metadata, evict (one step).
        Otherwise only look up, counting `unknown_reads`.
        """
        ids = self._checked_ids(ids)
        out = torch.empty_like(ids)
        self._map_into(ids, out, training=training)
        return out

    def map_ids_into(self, ids: Tensor, out: Tensor, *, training: bool) -> int:
        """`map_ids` with the slots written into `out` (a contiguous CPU int64 `(N,)` tensor,
        e.g. the span of a remapped KJT's values: no copy after). Returns the number of ids
        without a slot (the -1 written), so a caller needs no pass over `out` to know."""
        if type(self).map_ids is not DynamicTable.map_ids:
            # a subclass maps ids its own way (a sharded part exchanges them): through it
            slots = self.map_ids(ids, training=training)
            out.copy_(slots)
            return int((slots < 0).sum())
        return self._map_into(self._checked_ids(ids), out, training=training)

    def _checked_ids(self, ids: Tensor) -> Tensor:
        ids = ids.reshape(-1)
        if ids.is_floating_point() or ids.is_complex() or ids.dtype is torch.bool:
            raise TypeError(
                f"dynamic table {self.name!r}: raw ids must be integers, got dtype {ids.dtype}; "
                "cast whole numbers with .long()"
            )
        return ids.to(device="cpu", dtype=torch.int64)

    def _map_into(self, ids: Tensor, out: Tensor, *, training: bool) -> int:
        """`map_ids` of checked ids into `out`; the number of -1 written."""
        self._sync_map()
        if not training:
            if self._undo is not None:  # rolled back: the unknown-read count (undo.py)
                self._undo.started = True
            self.in_flight.flush_resets()
            self.map.find(ids, out=out)
            unknown = int((out < 0).sum())
            self._counters["unknown_reads"] += unknown
            return unknown
        return self._train_step(ids, out)

    def evict(self, slots: Tensor) -> None:
        """Free `slots` (occupied ones; others are skipped) and reset them through the hooks."""
        slots = slots.reshape(-1).to(device="cpu", dtype=torch.int64)
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= self.capacity):
            raise IndexError(f"dynamic table {self.name!r}: slots must lie in [0, {self.capacity})")
        slots = torch.unique(slots)
        self._sync_map()
        self._free(slots[self.occupied[slots]])
        self.in_flight.flush_resets()

    def start_undo(self) -> None:
        """Record what the next training `map_ids` changes, so that `rollback_step` can take it
        back (`undo.py`); end the record with `commit_step` or `rollback_step`. Its freed
        slots' resets wait for `commit_step` (none runs for a rolled-back step)."""
        flight = self.in_flight
        # plain attribute writes (nn.Module.__setattr__ costs microseconds a step)
        buffers = self.__dict__.setdefault("_undo_buffers", {})
        self.__dict__["_undo"] = StepUndo(
            self._counters, len(flight._deferred), not flight.defer_resets, buffers
        )
        flight.defer_resets = True

    def commit_step(self) -> None:
        """Keep the recorded step (`start_undo`): drop its record, run its resets when the
        table does not defer them."""
        undo = self.__dict__.pop("_undo", None)
        self.__dict__["_undo"] = None
        if undo is not None and undo.forced_defer:
            self.in_flight.defer_resets = False
            self.in_flight.flush_resets()

    def rollback_step(self) -> None:
        """Return the table to exactly its state before the recorded step (`start_undo`):
        slots, metadata, stamps, counts, free stack, sketch, counters, cursors, queued resets,
        the id index. A record of a step that never ran here (another kind of map) is dropped."""
        undo = self.__dict__.pop("_undo", None)
        self.__dict__["_undo"] = None
        if undo is None:
            return
        flight = self.in_flight
        if undo.forced_defer:
            flight.defer_resets = False
        while len(flight._deferred) > undo.deferred:
            flight._deferred.pop()
        if not undo.started:
            return
        undo.restore(self._slot_meta(), self.free_slots, self.sketch)
        if undo.stamps is not None:
            assert self._recent is not None
            stamps, self._recent.base, self._recent.dirty = undo.stamps
            self._recent.stamps.copy_(stamps)
        self._counters = dict(undo.counters)
        self._map_stale = True  # the index is rebuilt from slot_ids / occupied

    def items(self) -> tuple[Tensor, Tensor]:
        """`(ids, slots)` of every occupied slot, in slot order (for checkpoints)."""
        slots = torch.nonzero(self.occupied).reshape(-1)
        return self.slot_ids[slots], slots

    def load_items(
        self,
        ids: Tensor,
        slots: Tensor,
        *,
        last_seen: Tensor | None = None,
        counts: Tensor | None = None,
    ) -> None:
        """Replace the table's contents with `ids[i] -> slots[i]` (for re-partitioned or
        resized checkpoints): metadata from `last_seen` / `counts` (default 0), counters and
        cursors kept, the sketch kept. Slots below the highest one given that stay empty
        become free, the lowest reused first. The rows are the caller's to load."""
        ids = ids.reshape(-1).to(device="cpu", dtype=torch.int64)
        slots = slots.reshape(-1).to(device="cpu", dtype=torch.int64)
        where = f"dynamic table {self.name!r}: load_items"
        if ids.numel() != slots.numel():
            raise ValueError(f"{where}: {ids.numel()} ids but {slots.numel()} slots")
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= self.capacity):
            raise ValueError(
                f"{where}: slots must lie in [0, {self.capacity}) (the capacity); a larger "
                "table's slots need a table at least that large"
            )
        if torch.unique(slots).numel() != slots.numel() or torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"{where}: ids and slots must be distinct")
        self.occupied.zero_()
        self.slot_ids.zero_()
        self.last_seen.zero_()
        self.counts.zero_()
        self.occupied[slots] = True
        self.slot_ids[slots] = ids
        if last_seen is not None:
            self.last_seen[slots] = last_seen.reshape(-1).to("cpu", torch.int64)
        if counts is not None:
            self.counts[slots] = counts.reshape(-1).to("cpu", torch.int64)
        high = int(slots.max()) + 1 if slots.numel() else 0
        free = torch.nonzero(~self.occupied[:high]).reshape(-1).flip(0)
        self.free_slots[: free.numel()] = free
        self._counters["n_free"] = free.numel()
        self._counters["high_water"] = high
        self._map_stale = True

    def find(self, ids: Tensor) -> Tensor:
        """`(N,)` slot of each raw id, -1 when absent; changes nothing, counts nothing."""
        self._sync_map()
        return self.map.find(ids)

    @property
    def generation(self) -> int:
        """Training steps so far: with the slot, the counter of the rows a freed slot is
        reset to (`dynamic/reset.py`); while deferred resets run, the generation their slots
        were freed at (`in_flight.py`)."""
        deferred = self.in_flight.reset_generation
        return self._counters["steps"] if deferred is None else deferred

    def stats(self) -> dict[str, int]:
        """Plain numbers: capacity, occupancy, admissions, rejections, evictions, unknown
        reads and training steps so far."""
        c = self._counters
        return {
            "capacity": self.capacity,
            "occupancy": int(self.occupied.sum()),
            "admissions": c["admissions"],
            "rejections": c["rejections"],
            "evictions": c["evictions"],
            "unknown_reads": c["unknown_reads"],
            "steps": c["steps"],
        }

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> DynamicTable:
        """`.to()`, `.cuda()`, `.half()`, `to_empty()` leave the table as it is: the id map
        and its metadata live on the CPU whatever device the rows are on."""
        return self

    # ---- checkpoint hooks -------------------------------------------------------------------

    def get_extra_state(self) -> dict[str, int]:
        return dict(self._counters)

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict) or set(state) != set(COUNTERS):
            raise ValueError(
                f"dynamic table {self.name!r}: extra state must hold {list(COUNTERS)}, got "
                f"{state!r}"
            )
        self._counters = {k: int(state[k]) for k in COUNTERS}
        self._map_stale = True

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        if self._recent is not None:
            self._recent.discard()  # the loaded last_seen replaces every touch
        super()._load_from_state_dict(*args, **kwargs)
        self._map_stale = True
        self.in_flight.drop_resets()

    def _sync_map(self) -> None:
        """Rebuild the id index from `slot_ids` / `occupied` after a load."""
        if not self._map_stale:
            return
        self.map.clear()
        ids, slots = self.items()
        self.map.insert(ids, slots)
        self._map_stale = False

    # ---- one training step ------------------------------------------------------------------

    def _train_step(self, ids: Tensor, out: Tensor) -> int:
        """One training step's map work for `ids`: their slots written into `out`; returns
        the number of ids left without a slot (-1)."""
        c = self._counters
        c["steps"] += 1
        step = c["steps"]
        # Each policy's metadata only: LRU / TTL read last_seen, LFU both, NONE neither
        # (one random write per id and array saved).
        # One pass finds, touches and collects the distinct missing ids (marked in `slots`).
        policy = self.config.eviction
        # The native map enters the missing ids as pending on the way (no dedup set): each
        # gets its slot in the insertion below or is dropped here, also when a step fails.
        pending = self.map.can_pend(ids.numel())
        recent = self._recent if pending else None
        if self._undo is not None:
            self._start_record(self._undo, direct_touch=recent is None)
        slots, uniq, occurrences = self.map.find_touch_missing(
            ids,
            None if policy is EvictionPolicy.NONE or recent is not None else self.last_seen,
            self.counts if policy is EvictionPolicy.LFU else None,
            step,
            pending=pending,
            out=out,
            stamps=(
                None
                if recent is None
                else (recent.stamps, recent.stamp_for(step, self._last_seen_unsynced()))
            ),
        )
        admitted = c["admissions"]
        done = False
        try:
            if self.config.eviction is EvictionPolicy.TTL:
                ttl_sweep(self, step)
            if uniq.numel() == 0:
                done = True
                return 0
            slot_of = self._insert_new(uniq, occurrences, step)
            done = True
        finally:
            if pending and (not done or c["admissions"] - admitted < uniq.numel()):
                self.map.drop_pending(uniq)
        return self.map.fill_missing(slots, slot_of)

    def _start_record(self, undo: StepUndo, *, direct_touch: bool) -> None:
        """Copy what the find pass writes in place for every found id (`undo.py`)."""
        undo.started = True
        policy = self.config.eviction
        if self._recent is not None:
            r = self._recent
            undo.stamps = (undo.copy("stamps", r.stamps), r.base, r.dirty)
        if direct_touch and policy is not EvictionPolicy.NONE:
            undo.last_seen = undo.copy("last_seen_before", self._last_seen_unsynced())
        if policy is EvictionPolicy.LFU:
            undo.counts = undo.copy("counts_before", self.counts)

    def _insert_new(self, uniq: Tensor, occurrences: Tensor, step: int) -> Tensor:
        """Admission, eviction and insertion of the distinct missing ids `uniq` (in order of
        first appearance, seen `occurrences` times): their new slots, -1 where rejected."""
        c = self._counters
        # ALWAYS admits all: the chosen are a prefix (slices, no index tensors)
        picked = (
            None
            if self.config.admission is AdmissionPolicy.ALWAYS
            else torch.nonzero(self._admit(uniq, occurrences, step)).reshape(-1)
        )
        need = uniq.numel() if picked is None else picked.numel()
        c["rejections"] += uniq.numel() - need
        if need > self._available() and self.config.eviction is not EvictionPolicy.NONE:
            full = self._available() == 0
            victims = self._evict_for(need - self._available(), step)
            if full and victims.numel() and self.map.backend == "native":
                return self._replace(uniq, occurrences, picked, need, victims, step)
            self._free(victims)
        take = min(need, self._available())
        c["rejections"] += need - take
        slot_of = torch.full_like(uniq, -1)
        if take:
            chosen: Tensor | slice = slice(0, take) if picked is None else picked[:take]
            new_ids = uniq[chosen]
            new_slots = self._allocate(take)
            new_counts = occurrences[chosen]
            if self._undo is not None:
                self._undo.save_fresh(new_slots)
            if self.map.backend == "native":  # the same writes in one pass
                self.map.admit_slots(
                    new_ids, new_slots, new_counts, step, self._slot_meta(), stamps=self._stamps()
                )
            else:
                self.map.insert(new_ids, new_slots)
                self.slot_ids[new_slots] = new_ids
                self.occupied[new_slots] = True
                self.last_seen[new_slots] = step
                self.counts[new_slots] = new_counts
            c["admissions"] += take
            slot_of[chosen] = new_slots
        return slot_of

    def _replace(
        self,
        uniq: Tensor,
        occurrences: Tensor,
        picked: Tensor | None,
        need: int,
        victims: Tensor,
        step: int,
    ) -> Tensor:
        """A full table: the admitted ids take the `victims`' slots in their order, in one
        native call (`replace_slots`). The same state as `_free(victims)` and then the
        allocation (which pops exactly the victims, in order, off an empty free stack),
        including the free stack's buffer."""
        c = self._counters
        take = victims.numel()
        c["rejections"] += need - take
        chosen: Tensor | slice = slice(0, take) if picked is None else picked[:take]
        if self._undo is not None:
            self._undo.save_slots(victims, self._slot_meta())
            self._undo.save_free_stack(self.free_slots, 0, take)
        self.map.replace_slots(
            victims,
            uniq[chosen],
            occurrences[chosen],
            step,
            self._slot_meta(),
            stamps=self._stamps(),
        )
        self.free_slots[:take] = victims
        c["evictions"] += take
        c["admissions"] += take
        self.in_flight.freed(victims)
        if take == uniq.numel() and picked is None:
            return victims  # every id admitted, in order (read only from here on)
        slot_of = torch.full_like(uniq, -1)
        slot_of[chosen] = victims
        return slot_of

    def _admit(self, uniq: Tensor, occurrences: Tensor, step: int) -> Tensor:
        cfg = self.config
        if cfg.admission is AdmissionPolicy.THRESHOLD:
            width = self.sketch.shape[1]
            estimate = None
            for row, salt in enumerate(_SKETCH_SALTS):
                cells = mix64(uniq ^ (salt + cfg.admission_seed)) & (width - 1)
                self.sketch[row].index_add_(0, cells, occurrences)
                if self._undo is not None:
                    self._undo.sketch.append((row, cells, occurrences.clone()))
                value = self.sketch[row][cells]
                estimate = value if estimate is None else torch.minimum(estimate, value)
            assert estimate is not None
            return estimate >= cfg.admission_threshold
        if cfg.admission is AdmissionPolicy.PROBABILITY:
            p = float(cfg.admission_probability)
            if p >= 1.0:
                return torch.ones_like(uniq, dtype=torch.bool)
            key = mix64(uniq) ^ mix64(torch.tensor(step * 0x9E3779B97F4A7C15 % (1 << 63)))
            draw = uniform01(key ^ cfg.admission_seed)
            # c sightings in this step each admit with probability p: one draw decides.
            chance = 1.0 - (1.0 - p) ** occurrences.to(torch.float64)
            return draw < chance
        return torch.ones_like(uniq, dtype=torch.bool)

    def _available(self) -> int:
        c = self._counters
        return c["n_free"] + self.capacity - c["high_water"]

    def _allocate(self, k: int) -> Tensor:
        c = self._counters
        reused = min(k, c["n_free"])
        top = c["n_free"]
        parts = [self.free_slots[top - reused : top].clone()]
        c["n_free"] = top - reused
        fresh = k - reused
        parts.append(torch.arange(c["high_water"], c["high_water"] + fresh))
        c["high_water"] += fresh
        return torch.cat(parts)

    def _free(self, slots: Tensor) -> None:
        if slots.numel() == 0:
            return
        c = self._counters
        if self._undo is not None:
            self._undo.save_slots(slots, self._slot_meta())
            self._undo.save_free_stack(self.free_slots, c["n_free"], c["n_free"] + slots.numel())
        if self.map.backend == "native":  # the same writes in one pass
            self.map.free_slots(slots, self._slot_meta(), stamps=self._stamps())
        else:
            self.map.erase(self.slot_ids[slots])
            self.occupied[slots] = False
            self.slot_ids[slots] = 0
            self.last_seen[slots] = 0
            self.counts[slots] = 0
        n = c["n_free"]
        self.free_slots[n : n + slots.numel()] = slots
        c["n_free"] = n + slots.numel()
        c["evictions"] += slots.numel()
        self.in_flight.freed(slots)

    def _run_reset_hooks(self, slots: Tensor) -> None:
        for hook in self._reset_hooks:
            hook(slots)

    def _slot_meta(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """`(slot_ids, occupied, last_seen, counts)` for the native writers (contiguous;
        last_seen unsynced: the writers clear the stamps of the slots they write)."""
        meta = (self.slot_ids, self.occupied, self._last_seen_unsynced(), self.counts)
        assert all(t.is_contiguous() and t.device.type == "cpu" for t in meta)
        return meta

    def _stamps(self) -> Tensor | None:
        """The byte-per-slot touches the native writers clear (None: the table keeps none)."""
        return None if self._recent is None else self._recent.stamps

    def _evict_for(self, k: int, step: int) -> Tensor:
        """Up to `k` victims by the eviction policy, in eviction order (not freed yet)."""
        return evict_for(self, k, step)

    def extra_repr(self) -> str:
        cfg = self.config
        return (
            f"name={self.name!r}, capacity={self.capacity}, eviction={cfg.eviction.value}, "
            f"admission={cfg.admission.value}, map={self.map.backend}"
        )


def _flush_before_save(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    """A saved table has the rows of its freed slots reset (no deferred reset pending)."""
    assert isinstance(module, DynamicTable)
    module.in_flight.flush_resets()
    if module._recent is not None:
        module._recent.sync(module._last_seen_unsynced())  # state_dict reads the buffers
