"""The job's world size, from the default process group or the launcher's environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch.distributed as dist

__all__ = ["job_world_size"]


def job_world_size(*, environ: Mapping[str, str] | None = None) -> int:
    """The default process group's size when one is initialized, else `WORLD_SIZE` (set by
    torchrun and other launchers).

    Raises `ValueError` when neither exists, or when `WORLD_SIZE` is not a positive integer.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    env = os.environ if environ is None else environ
    raw = env.get("WORLD_SIZE")
    if raw is None:
        raise ValueError(
            "the world size is unknown: no torch.distributed process group is initialized and "
            "WORLD_SIZE is not set; call torch.distributed.init_process_group(...) first (or "
            "launch with torchrun), or pass topology=Topology(world_size=..., compute_device=...)"
        )
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"WORLD_SIZE must be a positive integer, got {raw!r}")
    return size
