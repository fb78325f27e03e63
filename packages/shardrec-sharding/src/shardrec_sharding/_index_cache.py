"""Small index tensors built from Python ints, cached per device.

`torch.tensor(list, device=cuda)` is a pageable host-to-device copy, which synchronizes the
stream; on the hot path that costs one host sync per call. The key positions a lookup or a
bucketizer reads are the same from step to step, so each distinct tuple is copied once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["IndexCache"]


class IndexCache:
    """`get(values, device)` -> an int64 tensor equal to `values`, built once per
    (values, device). Holds at most `capacity` entries (cleared when full), so a caller whose
    key order changes every step pays a copy per step but never grows memory."""

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._cache: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}

    def get(self, values: Sequence[int], device: torch.device) -> torch.Tensor:
        key = (tuple(values), device)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= self._capacity:
                self._cache.clear()
            found = torch.tensor(key[0], dtype=torch.int64, device=device)
            self._cache[key] = found
        return found
