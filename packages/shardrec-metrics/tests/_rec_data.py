"""Seeded random batches for the TorchRec-API metric tests (plain Python samples)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_metrics.rec.metrics_config import RecComputeMode, RecTaskInfo
from shardrec_metrics.rec.rec_metric import RecMetric

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


def make_metric(
    cls: type[RecMetric],
    tasks: Sequence[str],
    mode: RecComputeMode,
    window: int,
    world: int = 1,
    rank: int = 0,
    **kw: object,
) -> RecMetric:
    """`cls` for `tasks` on rank `rank` of `world`, batch size 4."""
    return cls(
        world_size=world,
        my_rank=rank,
        batch_size=4,
        tasks=[RecTaskInfo(name=t) for t in tasks],
        compute_mode=mode,
        window_size=window,
        **kw,
    )
