"""Sharing one plan among the ranks of a process group."""

from __future__ import annotations

import torch.distributed as dist

from shardrec_collectives import ShardingEnv, all_gather_object


def broadcast_plan_text(text: str | None, group: dist.ProcessGroup | None) -> str:
    """Rank 0 of `group` (default: the world) passes the plan's JSON, the others None; every rank
    returns rank 0's text.

    Built on shardrec-collectives' `all_gather_object`: each rank sends one small object (rank 0
    the JSON, a few KB to a few MB; the others None) and receives every rank's; rank 0's is kept.
    """
    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise RuntimeError("collective_plan needs an initialized torch.distributed process group")
    received = all_gather_object(ShardingEnv.from_process_group(pg), text)[0]
    if not isinstance(received, str):
        raise RuntimeError(f"plan broadcast delivered {type(received).__name__}, expected str")
    return received
