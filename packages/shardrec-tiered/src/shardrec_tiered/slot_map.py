"""The id -> cache slot map a `RowCache` reads through.

`SlotMap` is the protocol; `DenseSlotMap` serves tables whose ids are row numbers `[0, rows)`
(one int32 per row). A raw-id table plugs in a hash map with the same three methods (the
dynamic tables' `IdSlotMap`: `find`, `insert`, `erase`).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

__all__ = ["DenseSlotMap", "SlotMap"]


class SlotMap(Protocol):
    def find(self, ids: Tensor) -> Tensor:
        """int64 slot of each id, -1 where it is not cached."""
        ...

    def insert(self, ids: Tensor, slots: Tensor) -> None:
        """Map distinct uncached `ids` to `slots`."""
        ...

    def erase(self, ids: Tensor) -> int:
        """Forget cached `ids`; how many were present."""
        ...


class DenseSlotMap:
    """Direct-indexed map for ids in `[0, num_rows)` (allocated on first use, so a cache whose
    map is replaced right away, a raw-id table's, never allocates it)."""

    def __init__(self, num_rows: int) -> None:
        self.num_rows = num_rows
        self._table: Tensor | None = None

    @property
    def _slot(self) -> Tensor:
        if self._table is None:
            self._table = torch.full((self.num_rows,), -1, dtype=torch.int32)
        return self._table

    def find(self, ids: Tensor) -> Tensor:
        return self._slot[ids].long()

    def insert(self, ids: Tensor, slots: Tensor) -> None:
        self._slot[ids] = slots.to(torch.int32)

    def erase(self, ids: Tensor) -> int:
        present = int((self._slot[ids] >= 0).sum())
        self._slot[ids] = -1
        return present
