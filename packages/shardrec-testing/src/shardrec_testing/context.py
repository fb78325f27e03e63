"""What a function run by the rank pool receives on every rank."""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankContext:
    """One rank's view of the pool's process group.

    `pg` is the default (world) process group, initialized once per pool; `device` is `cpu` for
    gloo and this rank's GPU for NCCL.
    """

    rank: int
    world_size: int
    pg: dist.ProcessGroup
    device: torch.device
    backend: str
