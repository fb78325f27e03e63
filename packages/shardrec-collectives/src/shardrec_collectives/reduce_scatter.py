"""Reduce-scatter of pooled partial sums (output distribution of row-wise sharding).

Under row-wise sharding every rank holds a block of rows of every table, so every rank computes
a partial pooled sum for every sample of the global batch; summing over ranks gives the pooled
value, and each rank keeps its own samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_collectives import _checks, qcomm
from shardrec_collectives import _primitives as prim
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv

__all__ = ["reduce_scatter_pooled", "variable_batch_reduce_scatter_pooled"]


def reduce_scatter_pooled(
    env: ShardingEnv,
    partial: torch.Tensor,
    batch_size_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """Sum `partial` over ranks; each rank keeps the rows of its own samples.

    partial: `(sum_s B_s, D)`, rows of rank 0's samples first (same D on every rank).
    Sends: every rank's rows to their owner, summed on the way.
    Receives: `(B_rank, D)`, the sum over ranks of `partial[rows of this rank]`.
    Backward: all-gather of the gradient (every rank's partial sum got the same gradient).
    Uneven batches are padded to the largest.
    codecs: quantize each rank's chunk before it is sent (forward) and the gradient before it
        is gathered (backward), summing the decoded chunks in float32 (`qcomm.
        linked_reduce_scatter`; every rank passes the same); None: exact.
    """
    codecs = qcomm.checked_codecs(codecs, "reduce_scatter_pooled")
    _checks.per_rank(env, "batch_size_per_rank", batch_size_per_rank)
    _checks.non_negative("batch_size_per_rank", batch_size_per_rank)
    _checks.floating("partial", partial)
    if partial.dim() != 2 or partial.shape[0] != sum(batch_size_per_rank):
        raise ValueError(
            f"partial has shape {tuple(partial.shape)}, expected (sum of batch_size_per_rank "
            f"{list(batch_size_per_rank)} = {sum(batch_size_per_rank)}, D)"
        )
    dim = partial.shape[1]
    counts = [b * dim for b in batch_size_per_rank]
    batch = batch_size_per_rank[env.rank]
    flat = partial.reshape(-1)
    if codecs is None:
        receive = prim.linked_reduce_scatter_v(env, flat, counts)
    else:
        receive = qcomm.linked_reduce_scatter(env, flat, counts, codecs)

    def finish() -> torch.Tensor:
        return receive().view(batch, dim)

    return Awaitable(finish)


def variable_batch_reduce_scatter_pooled(
    env: ShardingEnv,
    partial: torch.Tensor,
    batch_size_per_feature_per_rank: Sequence[Sequence[int]],
    embedding_dims: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """Reduce-scatter of pooled partial sums when every feature has its own batch per rank.

    partial: 1-D, feature-major: for each feature f, `sum_s B[f][s]` rows of width `D_f`
        (rank 0's samples first), flattened (the layout of a lookup over the variable-batch KJT
        from `kjt_all_to_all`).
    batch_size_per_feature_per_rank: `B[f][s]` (same on every rank). embedding_dims: `[D_f]`.
    Receives: 1-D, feature-major: for each f, `B[f][rank] x D_f` summed values.
    Backward: all-gather of the gradient. codecs: as `reduce_scatter_pooled`'s.
    """
    codecs = qcomm.checked_codecs(codecs, "variable_batch_reduce_scatter_pooled")
    _checks.non_negative("embedding_dims", embedding_dims)
    _checks.floating("partial", partial)
    if len(batch_size_per_feature_per_rank) != len(embedding_dims):
        raise ValueError(
            f"batch_size_per_feature_per_rank has {len(batch_size_per_feature_per_rank)} rows "
            f"but embedding_dims has {len(embedding_dims)} features {list(embedding_dims)}"
        )
    for f, row in enumerate(batch_size_per_feature_per_rank):
        _checks.per_rank(env, f"batch_size_per_feature_per_rank[{f}]", row)
        _checks.non_negative(f"batch_size_per_feature_per_rank[{f}]", row)
    sizes = [
        [b * d for b in row]
        for row, d in zip(batch_size_per_feature_per_rank, embedding_dims, strict=True)
    ]
    _checks.shape("partial", partial, (sum(map(sum, sizes)),), f"sum of batch sizes x dims {sizes}")
    counts = [sum(row[s] for row in sizes) for s in range(env.world_size)]
    send = prim.transpose_segments(partial, sizes)
    if codecs is None:
        return Awaitable(prim.linked_reduce_scatter_v(env, send, counts))
    return Awaitable(qcomm.linked_reduce_scatter(env, send, counts, codecs))
