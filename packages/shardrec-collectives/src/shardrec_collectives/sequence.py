"""Sequence-embedding all-to-all: one embedding per id goes back to the rank that sent the id
(output distribution of EmbeddingCollection sharding)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives import qcomm
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.kjt_all_to_all import KJTAllToAllLayout

__all__ = ["sequence_all_to_all", "sequence_all_to_all_by_counts"]


def sequence_all_to_all(
    env: ShardingEnv,
    embeddings: torch.Tensor,
    layout: KJTAllToAllLayout,
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """Send each id's embedding back to the rank the id came from, in that rank's order.

    embeddings: `(N_recv, D)`, one row per value of the KJT received by the `kjt_all_to_all`
        whose `layout` is given, in its (feature-major) order.
    Sends: to rank s, the rows of the ids s sent, in the order s sent them.
    Receives: `(N_sent, D)`: one row per id of this rank's `per_rank[0]`, `per_rank[1]`, ...
        values, in that order. Works unchanged for variable batch per feature.
    Backward: the reverse all-to-all (and reordering) of the gradient.
    codecs: quantize the rows each rank is sent (forward, one encode per destination's rows)
        and their gradient (backward), as the pooled all-to-all (`qcomm.linked_all_to_all`;
        every rank passes the same); None: exact.
    """
    if len(layout.sent_values_per_rank) != env.world_size:
        raise ValueError(
            f"layout is for {len(layout.sent_values_per_rank)} ranks, env has {env.world_size}"
        )
    return sequence_all_to_all_by_counts(
        env,
        embeddings,
        [list(r) for r in layout.recv_values_per_key_per_rank],
        list(layout.sent_values_per_rank),
        codecs,
    )


def sequence_all_to_all_by_counts(
    env: ShardingEnv,
    embeddings: torch.Tensor,
    recv_values_per_key_per_rank: Sequence[Sequence[int]],
    sent_values_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
) -> Awaitable[torch.Tensor]:
    """`sequence_all_to_all` with the layout given as counts.

    recv_values_per_key_per_rank: `[F][S]` ids of local key f received from rank s (the rows
        of `embeddings`, feature-major). sent_values_per_rank: `[S]` ids this rank sent rank s.
    codecs: as `sequence_all_to_all`'s.
    """
    codecs = qcomm.checked_codecs(codecs, "sequence_all_to_all")
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (N, D), got shape {tuple(embeddings.shape)}")
    recv_per_rank = [sum(col) for col in zip(*recv_values_per_key_per_rank, strict=True)]
    if not recv_values_per_key_per_rank:
        recv_per_rank = [0] * env.world_size
    if embeddings.shape[0] != sum(recv_per_rank):
        raise ValueError(
            f"embeddings has {embeddings.shape[0]} rows but the all-to-all delivered "
            f"{sum(recv_per_rank)} ids {recv_per_rank} (per rank)"
        )
    # feature-major rows -> source-major rows, the order each source sent its ids in.
    send = prim.transpose_segments(embeddings, [list(r) for r in recv_values_per_key_per_rank])
    in_splits = recv_per_rank
    out_splits = list(sent_values_per_rank)
    if codecs is None:
        return Awaitable(prim.linked_all_to_all(env, send, in_splits, out_splits))
    # flat rows: each destination's rows are one segment of the codec
    dim, rows = embeddings.shape[1], sum(out_splits)
    receive = qcomm.linked_all_to_all(
        env, send.reshape(-1), [n * dim for n in in_splits], [n * dim for n in out_splits], codecs
    )
    return Awaitable(lambda: receive().view(rows, dim))
