"""Exchanges of raw ids and their slots (dynamic tables' id maps), not differentiable.

A sharded dynamic table routes every raw id to the rank whose id map owns it and sends the
slot back (`all_to_all_ids` there, `return_ids` back), or gives every replica of a replicated
map every rank's ids (`all_gather_ids`). Ids travel as int64 on `env.device`; the result is on
the input's device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives.env import ShardingEnv

__all__ = ["all_gather_ids", "all_to_all_ids", "return_ids"]


def _exchange(
    env: ShardingEnv, values: torch.Tensor, send: Sequence[int], recv: Sequence[int]
) -> torch.Tensor:
    src = values.to(device=env.device, dtype=torch.int64).contiguous()
    return prim.all_to_all_sync(env, src, send, recv).to(values.device)


def all_to_all_ids(
    env: ShardingEnv, values: torch.Tensor, send_counts: Sequence[int]
) -> tuple[torch.Tensor, list[int]]:
    """Rank r sends `send_counts[d]` consecutive ids of `values` to each rank d.

    Returns the ids received (from each source rank in rank order, concatenated) and how
    many came from each rank. Sends: the counts (one int64 per rank), then the ids.
    """
    if len(send_counts) != env.world_size or sum(send_counts) != values.numel():
        raise ValueError(
            f"all_to_all_ids: send_counts {list(send_counts)} must give one count per rank "
            f"({env.world_size}) summing to the {values.numel()} ids"
        )
    if env.world_size == 1:
        return values, [values.numel()]
    counts = torch.tensor(list(send_counts), dtype=torch.int64, device=env.device)
    ones = [1] * env.world_size
    got = prim.all_to_all_sync(env, counts, ones, ones)
    recv = [int(c) for c in got.tolist()]
    return _exchange(env, values, send_counts, recv), recv


def return_ids(
    env: ShardingEnv,
    values: torch.Tensor,
    recv_counts: Sequence[int],
    send_counts: Sequence[int],
) -> torch.Tensor:
    """The way back of `all_to_all_ids`: `values` (one per id received, in received order,
    `recv_counts` from each rank) go back to the ranks that sent the ids; each rank gets
    `send_counts` (what it sent) in its own send order."""
    if env.world_size == 1:
        return values
    return _exchange(env, values, recv_counts, send_counts)


def all_gather_ids(env: ShardingEnv, values: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Every rank's ids concatenated in rank order, and how many each rank gave."""
    if env.world_size == 1:
        return values, [values.numel()]
    world = env.world_size
    counts = [values.numel()] * world
    mine = torch.tensor(counts, dtype=torch.int64, device=env.device)
    got = prim.all_to_all_sync(env, mine, [1] * world, [1] * world)
    recv = [int(c) for c in got.tolist()]
    return _exchange(env, values.repeat(world), counts, recv), recv
