"""`StepUndo`: what one training step of a `DynamicTable` changed, to take it back.

A sharded collection maps a batch's exchanged ids with every owner's map before the ranks learn
whether any owner's map raised (`shardrec_sharding._dynamic_exchange`). When one did, every map
that mapped the batch returns to its state before it (`DynamicTable.rollback_step`), so that
training continues as if the batch had never been seen. The record is built only when the
caller asks for it (`DynamicTable.start_undo`), and holds, in the order things happened:

- the scalar counters and cursors (a dict copy);
- the per-slot metadata `(slot_ids, occupied, last_seen, counts)` of every slot the step
  freed (evicted, expired), *before* it wrote them, restored in reverse; of the free slots an
  admission took, only which they were (a free slot's metadata is all zero);
- the regions of the free stack the step overwrote;
- the sketch increments of the admission (undone by subtracting them);
- whole copies of only what the find pass touches in place for every found id: the byte
  stamps (`stamps.py`, 1 byte a slot), or `last_seen` where the pass writes it directly (TTL,
  the torch backend), and `counts` for LFU; with stamps, `last_seen` is copied too, but only
  when an eviction's scan folds the step's stamps into it (the first such fold of the step);
- how many deferred resets were queued (`in_flight.py`): the step's own are dropped. A record
  defers the step's resets even when the table does not, and runs them at `commit`, so a
  rolled-back step never reset a row (no row copies needed).

The native map's index is not undone entry by entry: it is rebuilt from `slot_ids` /
`occupied` (the load path), which gives the same id -> slot answers.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["StepUndo"]


WHOLE = 8
"""A write to at least capacity / WHOLE slots copies the four metadata arrays whole (a
sequential copy into reused buffers) instead of gathering the slots' entries."""


class StepUndo:
    """The undo record of one training step (module docstring); filled by `DynamicTable`.

    buffers: the table's copy buffers, reused record after record (no allocation a step).
    """

    def __init__(
        self,
        counters: dict[str, int],
        deferred: int,
        forced_defer: bool,
        buffers: dict[str, Tensor],
    ) -> None:
        self.counters = dict(counters)
        self.deferred = deferred
        self.forced_defer = forced_defer
        self._buffers = buffers
        self.slots: list[tuple[str, tuple[Tensor | None, ...]]] = []
        """In order: ("slots", (slots, ids, occupied, last_seen, counts)) before a free,
        ("fresh", (slots,)) before an admission, ("whole", the four arrays) copied whole."""
        self.free_stack: list[tuple[int, Tensor]] = []
        self.sketch: list[tuple[int, Tensor, Tensor]] = []
        self.stamps: tuple[Tensor, int, bool] | None = None
        self.last_seen: Tensor | None = None
        self.counts: Tensor | None = None
        self.started = False
        """Whether the step began changing the table (a record of a step never run is empty)."""
        self._whole = False

    def copy(self, name: str, t: Tensor) -> Tensor:
        """`t` copied into the reused buffer `name`."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape != t.shape or buffer.dtype != t.dtype:
            buffer = self._buffers[name] = t.new_empty(t.shape)
        return buffer.copy_(t)

    def save_slots(self, slots: Tensor, meta: tuple[Tensor, Tensor, Tensor, Tensor]) -> None:
        """Keep `slots`' metadata `(slot_ids, occupied, last_seen (raw), counts)` before a write."""
        if self._whole:
            return  # the whole copy taken earlier in this step covers it
        if slots.numel() * WHOLE >= meta[0].numel():
            # last_seen / counts already copied whole (the find pass's) need no second copy
            skip = {"last_seen": self.last_seen is not None, "counts": self.counts is not None}
            names = ("slot_ids", "occupied", "last_seen", "counts")
            self.slots.append(
                (
                    "whole",
                    tuple(
                        None if skip.get(n) else self.copy(n, t)
                        for n, t in zip(names, meta, strict=True)
                    ),
                )
            )
            self._whole = True
            return
        slots = slots.clone()
        self.slots.append(("slots", (slots, *(t[slots] for t in meta))))

    def save_fresh(self, slots: Tensor) -> None:
        """Note `slots` before an admission writes them: free slots, whose metadata is all
        zero (a freed slot is zeroed, one above the high-water mark never written)."""
        if not self._whole:
            self.slots.append(("fresh", (slots.clone(),)))

    def save_free_stack(self, free_slots: Tensor, start: int, end: int) -> None:
        """Keep the free stack's entries `[start, end)` before a write."""
        self.free_stack.append((start, free_slots[start:end].clone()))

    def restore(
        self,
        meta: tuple[Tensor, Tensor, Tensor, Tensor],
        free_slots: Tensor,
        sketch: Tensor,
    ) -> None:
        """Write every kept value back (the counters and the stamps' owner are the table's)."""
        last_seen, counts = meta[2], meta[3]
        for row, cells, added in reversed(self.sketch):
            sketch[row].index_add_(0, cells, -added)
        for start, old in reversed(self.free_stack):
            free_slots[start : start + old.numel()] = old
        for kind, saved in reversed(self.slots):
            if kind == "whole":
                for t, whole in zip(meta, saved, strict=True):
                    if whole is not None:
                        t.copy_(whole)
            elif kind == "fresh":  # free slots an admission took
                fresh = saved[0]
                assert fresh is not None
                for t in meta:
                    t[fresh] = 0
            else:
                slots, *olds = [t for t in saved if t is not None]  # none is None here
                for t, old in zip(meta, olds, strict=True):
                    t[slots] = old
        if self.last_seen is not None:
            last_seen.copy_(self.last_seen)
        if self.counts is not None:
            counts.copy_(self.counts)
