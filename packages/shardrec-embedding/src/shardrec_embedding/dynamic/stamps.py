"""`RecentStamps`: a training step's LRU touch as one byte per slot, folded into `last_seen`.

A resident training step touches `last_seen[slot] = step` for every id it finds: one random
int64 write per distinct id, in an array of `8 x capacity` bytes (a 100k table: ~10,400 of its
12,500 lines a step, each a miss of its own after the step's lookup evicted them). The native
find pass writes instead `stamps[slot] = step - base` (1..255) into a byte per slot: 1/8 of
the lines, few enough to stay cached through the pass (docs/bench/dynamic.md, s12-dynres).

`last_seen` stays the table's state (saved, loaded, read by the eviction policies): the stamps
are folded into it (`sync`: `last_seen[i] = base + stamps[i]` where a stamp is set, the stamp
then cleared) before anything reads it (`DynamicTable.last_seen` is a property that syncs),
and the native writers of `last_seen` (admission, eviction) clear the slot's stamp. A stamp
that would not fit a byte (255 steps after `base`) moves `base` after a sync.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_embedding.dynamic.id_map import _library

__all__ = ["RecentStamps"]

_MAX_STAMP = 255


class RecentStamps:
    """The byte-per-slot touches of the steps since `base` (0: none since the last sync)."""

    def __init__(self, capacity: int) -> None:
        self.stamps = torch.zeros(capacity, dtype=torch.uint8)
        self.base = 0
        self.dirty = False

    def stamp_for(self, step: int, last_seen: Tensor) -> int:
        """The byte that marks a touch at `step` (`base` moved, after a sync into `last_seen`,
        when `step` lies outside `base + 1 .. base + 255`)."""
        d = step - self.base
        if not 1 <= d <= _MAX_STAMP:
            self.sync(last_seen)
            self.base = step - 1
            d = 1
        self.dirty = True
        return d

    def sync(self, last_seen: Tensor) -> None:
        """`last_seen[i] = base + stamps[i]` wherever a stamp is set; the stamps cleared."""
        if not self.dirty:
            return
        lib = _library()
        assert lib is not None and last_seen.is_contiguous()
        lib.sr_idmap_stamps_sync(
            self.stamps.data_ptr(), self.stamps.numel(), last_seen.data_ptr(), self.base
        )
        self.dirty = False

    def discard(self) -> None:
        """Forget every stamp (the table's state was replaced by a load)."""
        if self.dirty:
            self.stamps.zero_()
            self.dirty = False
