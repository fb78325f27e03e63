"""All-gather of pooled embeddings: every rank gets every rank's rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_collectives import _checks
from shardrec_collectives import _primitives as prim
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv

__all__ = ["all_gather_pooled"]


def all_gather_pooled(
    env: ShardingEnv, local: torch.Tensor, batch_size_per_rank: Sequence[int]
) -> Awaitable[torch.Tensor]:
    """Concatenate every rank's rows on every rank.

    local: `(B_rank, D)` (same D on every rank). batch_size_per_rank: `[B_s]`.
    Sends: `local` to every rank. Receives: `(sum_s B_s, D)`, rank 0's rows first.
    Backward: reduce-scatter of the gradient (rank s gets the sum over ranks of the gradient of
    its rows). Uneven batches are padded to the largest.
    """
    _checks.per_rank(env, "batch_size_per_rank", batch_size_per_rank)
    _checks.non_negative("batch_size_per_rank", batch_size_per_rank)
    if local.dim() != 2 or local.shape[0] != batch_size_per_rank[env.rank]:
        raise ValueError(
            f"local has shape {tuple(local.shape)}, expected (batch_size_per_rank[{env.rank}] = "
            f"{batch_size_per_rank[env.rank]}, D)"
        )
    dim = local.shape[1]
    counts = [b * dim for b in batch_size_per_rank]
    flat = local.reshape(-1)
    receive = prim.linked_all_gather_v(env, flat, counts)

    def finish() -> torch.Tensor:
        return receive().view(sum(batch_size_per_rank), dim)

    return Awaitable(finish)
