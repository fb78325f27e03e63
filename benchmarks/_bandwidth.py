"""This machine's memory bandwidth as the benchmarks' floors use it (fused_training.py,
optim_update.py): a large tensor copy, imported by each script from its folder."""

from __future__ import annotations

import time

import torch


def copy_bandwidth_gbs() -> float:
    """Bytes read + written per second by a large tensor copy (best of 7: the hardware's rate,
    not the share a loaded machine leaves us)."""
    src = torch.rand(64 << 20)  # 256 MB
    dst = torch.empty_like(src)
    dst.copy_(src)
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        dst.copy_(src)
        samples.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / min(samples) / 1e9
