"""Pooled-embedding all-to-all: pooled rows go back from the ranks that own the tables to the
ranks that own the samples (output distribution of table-wise and column-wise sharding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from shardrec_collectives import _checks, qcomm
from shardrec_collectives import _primitives as prim
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv

__all__ = ["pooled_all_to_all", "pooled_all_to_all_flat", "variable_batch_pooled_all_to_all"]


def pooled_all_to_all(
    env: ShardingEnv,
    local_embs: torch.Tensor,
    batch_size_per_rank: Sequence[int],
    dim_sum_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """Return every rank its samples' pooled embeddings from every rank's tables.

    local_embs: `(sum_s B_s, D_r)` on rank r: the pooled output of r's tables for the whole
        received batch, rows of rank 0's samples first, then rank 1's, ... (the row order of the
        KJT `kjt_all_to_all` produces).
    batch_size_per_rank: `[B_s]` samples of each rank s. dim_sum_per_rank: `[D_r]` embedding
        width of each rank's tables.

    Sends: rows of rank s's samples, `(B_s, D_r)`, to rank s.
    Receives: `(B_rank, sum_r D_r)`, the columns of rank 0's tables first, then rank 1's, ...
    Backward: the reverse all-to-all of the gradient's column blocks.
    codecs: quantize what is sent (forward: the rows; backward: their gradient) with these
        codecs (`qcomm`; every rank passes the same); None: exact.
    """
    receive = _launch(env, local_embs, batch_size_per_rank, dim_sum_per_rank, codecs)
    batch = batch_size_per_rank[env.rank]

    def finish() -> torch.Tensor:
        received = receive()
        blocks = torch.split(received, [batch * d for d in dim_sum_per_rank])
        out = torch.cat(
            [b.view(batch, d) for b, d in zip(blocks, dim_sum_per_rank, strict=True)], 1
        )
        return out

    return Awaitable(finish)


def pooled_all_to_all_flat(
    env: ShardingEnv,
    local_embs: torch.Tensor,
    batch_size_per_rank: Sequence[int],
    dim_sum_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """`pooled_all_to_all` without its final column concatenation: the received buffer as is.

    Same arguments and traffic. Receives: `(B_rank * sum_r D_r,)`, rank-major: rank r's block
    `(B_rank, D_r)`, row-major, at offset `B_rank * sum(D_<r)`. A caller that places those
    blocks' columns itself (the sharded EmbeddingBagCollection writes them straight into the
    module's key order) saves the concatenation's copy, and in backward its gradient is the
    reverse all-to-all's send buffer as it is (no copy either).
    """
    return Awaitable(_launch(env, local_embs, batch_size_per_rank, dim_sum_per_rank, codecs))


def _launch(
    env: ShardingEnv,
    local_embs: torch.Tensor,
    batch_size_per_rank: Sequence[int],
    dim_sum_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None,
) -> Callable[[], torch.Tensor]:
    """Check the arguments of a pooled all-to-all and launch it; the function that waits for
    the flat, rank-major receive buffer (linked: backward is the reverse all-to-all)."""
    _checks.per_rank(env, "batch_size_per_rank", batch_size_per_rank)
    _checks.per_rank(env, "dim_sum_per_rank", dim_sum_per_rank)
    _checks.non_negative("batch_size_per_rank", batch_size_per_rank)
    _checks.non_negative("dim_sum_per_rank", dim_sum_per_rank)
    _checks.floating("local_embs", local_embs)
    dim = dim_sum_per_rank[env.rank]
    _checks.shape(
        "local_embs",
        local_embs,
        (sum(batch_size_per_rank), dim),
        f"sum of batch_size_per_rank {list(batch_size_per_rank)} x this rank's dim {dim}",
    )
    batch = batch_size_per_rank[env.rank]
    in_splits = [b * dim for b in batch_size_per_rank]
    out_splits = [batch * d for d in dim_sum_per_rank]
    flat = local_embs.reshape(-1)
    if codecs is None:
        return prim.linked_all_to_all(env, flat, in_splits, out_splits)
    # encoded before the send, decoded after the receive (forward and backward)
    return qcomm.linked_all_to_all(env, flat, in_splits, out_splits, codecs)


def variable_batch_pooled_all_to_all(
    env: ShardingEnv,
    local_embs: torch.Tensor,
    batch_size_per_feature_per_rank: Sequence[Sequence[int]],
    emb_dim_per_rank_per_feature: Sequence[Sequence[int]],
    local_batch_size_per_rank_per_feature: Sequence[Sequence[int]],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """Pooled all-to-all when every feature has its own batch size on every rank.

    On rank r, owning features j = 0..F_r-1 (feature order of `emb_dim_per_rank_per_feature[r]`):

    local_embs: 1-D, feature-major: for each local feature j, its `sum_s B[j][s]` pooled rows of
        width `D_j` (rows of rank 0's samples first), flattened row by row. This is the layout a
        lookup over the variable-batch KJT from `kjt_all_to_all` produces.
    batch_size_per_feature_per_rank: `B[j][s]`, bags of local feature j from rank s (the received
        KJT's `stride_per_key_per_rank()`).
    emb_dim_per_rank_per_feature: `[r][j]` width of rank r's feature j (same on every rank).
    local_batch_size_per_rank_per_feature: `[r][j]` this rank's batch size for rank r's feature
        j (what this rank sent it in the KJT all-to-all).

    Sends: to rank s, for each local feature j, its `B[j][s] x D_j` values.
    Receives: 1-D, source-major: for r = 0.. and its features j, `local_batch[r][j] x D[r][j]`
        values (row-major). Backward: the reverse all-to-all.
    codecs: as `pooled_all_to_all`'s (each destination's segment, all its features, encoded on
        its own).
    """
    codecs = qcomm.checked_codecs(codecs, "variable_batch_pooled_all_to_all")
    _checks.per_rank(env, "emb_dim_per_rank_per_feature", emb_dim_per_rank_per_feature)
    _checks.per_rank(
        env, "local_batch_size_per_rank_per_feature", local_batch_size_per_rank_per_feature
    )
    _checks.floating("local_embs", local_embs)
    dims = list(emb_dim_per_rank_per_feature[env.rank])
    if len(batch_size_per_feature_per_rank) != len(dims):
        raise ValueError(
            f"batch_size_per_feature_per_rank has {len(batch_size_per_feature_per_rank)} rows but "
            f"this rank owns {len(dims)} features (emb_dim_per_rank_per_feature[{env.rank}] = "
            f"{dims})"
        )
    for j, row in enumerate(batch_size_per_feature_per_rank):
        _checks.per_rank(env, f"batch_size_per_feature_per_rank[{j}]", row)
        _checks.non_negative(f"batch_size_per_feature_per_rank[{j}]", row)
    for r in range(env.world_size):
        if len(local_batch_size_per_rank_per_feature[r]) != len(emb_dim_per_rank_per_feature[r]):
            raise ValueError(
                f"local_batch_size_per_rank_per_feature[{r}] = "
                f"{list(local_batch_size_per_rank_per_feature[r])} must have one entry per "
                f"feature of rank {r} ({len(emb_dim_per_rank_per_feature[r])})"
            )
    sizes = [
        [b * d for b in row] for row, d in zip(batch_size_per_feature_per_rank, dims, strict=True)
    ]
    total = sum(map(sum, sizes))
    _checks.shape(
        "local_embs", local_embs, (total,), f"sum over features of batch sizes x dims {sizes}"
    )
    in_splits = [sum(row[s] for row in sizes) for s in range(env.world_size)]
    out_splits = [
        sum(b * d for b, d in zip(bs, ds, strict=True))
        for bs, ds in zip(
            local_batch_size_per_rank_per_feature, emb_dim_per_rank_per_feature, strict=True
        )
    ]
    # feature-major -> destination-major: the segment of (feature j, rank s) moves to (s, j).
    send = prim.transpose_segments(local_embs, sizes)
    if codecs is None:
        return Awaitable(prim.linked_all_to_all(env, send, in_splits, out_splits))
    return Awaitable(qcomm.linked_all_to_all(env, send, in_splits, out_splits, codecs))
