"""Seeded random batches for the TorchRec-API metric tests (plain Python samples)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

Sample = tuple[float, float, float]  # prediction, label, weight


def random_batches(
    seed: int, sizes: Sequence[int], tasks: Sequence[str]
) -> dict[str, list[list[Sample]]]:
    """Per task, one batch per size of (uniform prediction, 0/1 label, uniform weight)."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, list[list[Sample]]] = {t: [] for t in tasks}
    for b in sizes:
        for t in tasks:
            cols = [
                torch.rand(b, generator=g, dtype=torch.double),
                torch.randint(0, 2, (b,), generator=g).double(),
                torch.rand(b, generator=g, dtype=torch.double),
            ]
            out[t].append(list(zip(*(c.tolist() for c in cols), strict=True)))
    return out
