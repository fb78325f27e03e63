"""`RowStore`: what a `RowCache` reads rows from and writes them back to.

`FlatFileStore` (dense ids, store.py) is one; a raw-id table's store is another
(raw_ids.py: rows kept in a key-value store, unknown ids drawn from the table's initializer).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from shardrec_tiered.layout import StoreLayout

__all__ = ["RowStore"]


class RowStore(Protocol):
    layout: StoreLayout

    @property
    def bytes_read(self) -> int:
        """Bytes read from the store so far."""
        ...

    @property
    def bytes_written(self) -> int:
        """Bytes written to the store so far."""
        ...

    def read(self, ids: np.ndarray) -> np.ndarray:
        """`(n, stride)` float32 rows of sorted distinct int64 `ids`."""
        ...

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Store `(n, stride)` float32 `rows` at sorted distinct int64 `ids`."""
        ...

    def flush(self) -> None:
        """Make written rows durable."""
        ...
