"""Reduce-scatter of pooled partial sums (output distribution of row-wise sharding).

Under row-wise sharding every rank holds a block of rows of every table, so every rank computes
a partial pooled sum for every sample of the global batch; summing over ranks gives the pooled
value, and each rank keeps its own samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from shardrec_collectives import _checks, qcomm
from shardrec_collectives import _primitives as prim
from shardrec_collectives._held import track
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv

__all__ = ["GradientSink", "reduce_scatter_pooled", "variable_batch_reduce_scatter_pooled"]

GradientSink = Callable[[int, torch.Tensor, torch.Tensor], None]
"""`sink(split, first, second)`: takes the gradient of `partial` in two row pieces, rows
`[0, split)` in `first` and `[split, B)` in `second` (see `reduce_scatter_pooled`)."""


def reduce_scatter_pooled(
    env: ShardingEnv,
    partial: torch.Tensor,
    batch_size_per_rank: Sequence[int],
    codecs: qcomm.QuantizedCommCodecs | None = None,
    *,
    gradient_sink: GradientSink | None = None,
) -> Awaitable[torch.Tensor]:
    """Sum `partial` over ranks; each rank keeps the rows of its own samples.

    partial: `(sum_s B_s, D)`, rows of rank 0's samples first (same D on every rank).
    Sends: every rank's rows to their owner, summed on the way.
    Receives: `(B_rank, D)`, the sum over ranks of `partial[rows of this rank]`.
    Backward: all-gather of the gradient (every rank's partial sum got the same gradient),
    launched by the result's backward and waited for by `partial`'s (two autograd nodes,
    `_primitives.split_linked`; with codecs, one blocking node). Uneven batches are padded
    to the largest.
    codecs: quantize each rank's chunk before it is sent (forward) and the gradient before it
        is gathered (backward), summing the decoded chunks in float32 (`qcomm.
        linked_reduce_scatter`; every rank passes the same); None: exact.
    gradient_sink: where two gloo ranks exchange exactly (the pair path below), the backward
        hands `partial`'s gradient to the sink in two row pieces, this rank's rows as autograd
        gave them and the other rank's as received (no copy into one tensor), and gives
        autograd zeros (a zero-stride expanded scalar) for `partial`: `partial`'s true
        gradient is autograd's plus the pieces, and the sink's owner (the producer of
        `partial`, e.g. `shardrec_embedding.fused.segment_lookup`) must add them. Elsewhere
        ignored (autograd gets the whole gradient).
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
    if codecs is None and env.world_size == 2 and env.backend == "gloo":
        sink = gradient_sink if dim and partial.requires_grad else None
        receive = _pair_reduce_scatter(env, flat, counts, dim, sink)
    elif codecs is None:
        receive = prim.linked_reduce_scatter_v(env, flat, counts)
    else:
        receive = qcomm.linked_reduce_scatter(env, flat, counts, codecs)

    def finish() -> torch.Tensor:
        return receive().view(batch, dim)

    return Awaitable(finish)


def _pair_reduce_scatter(
    env: ShardingEnv,
    send: torch.Tensor,
    counts: Sequence[int],
    dim: int,
    sink: GradientSink | None,
) -> Callable[[], torch.Tensor]:
    """`prim.linked_reduce_scatter_v` for two gloo ranks, without moving this rank's own chunk
    through gloo: each rank sends the other its chunk (a view of `send`: no copy), and on wait
    sums the chunks in rank order, its own read where it lies. gloo's reduce-scatter
    all-reduces the whole input; the generic path's all-to-all of every chunk has gloo copy the
    own one (`memcpy`); gloo's all-gather (the backward) copies the own gradient into a buffer
    of its own and then that whole buffer into the result. Here the backward receives the
    other rank's gradient straight into its place in the result and copies the own one beside
    it while that exchange runs: the same values, bit for bit (the same sums; copies). The sum
    is taken in place in the received chunk (float addition commutes exactly, so `theirs +
    mine` is `mine + theirs` bit for bit): no new 6.8 MB result a step at the benchmark's shape.
    With a `sink` (`reduce_scatter_pooled`'s `gradient_sink`), the backward receives the other
    rank's gradient into a buffer of its own and hands both pieces to the sink: no `full`, no
    copy of the own gradient (session 12, s12-rowwise). Either backward is launched by the
    received tensor's backward node and waited for (the sink called) by `send`'s, so the
    autograd engine runs other backward work while it travels (session 12, s12-rsplit).
    """
    rank, other = env.rank, 1 - env.rank
    at = [0, counts[0]]
    mine = send.detach()[at[rank] : at[rank] + counts[rank]]
    to_other = send.detach()[at[other] : at[other] + counts[other]]
    splits = [0, 0]
    out_splits, in_splits = list(splits), list(splits)
    out_splits[other], in_splits[other] = counts[rank], counts[other]
    pending = _PairSum(prim.all_to_all(env, to_other, in_splits, out_splits), mine)

    def pieces(g: torch.Tensor) -> prim.Pending:
        """Backward with a sink: the other rank's gradient launched; both rows handed over
        on wait."""
        assert sink is not None
        return _Pieces(prim.all_to_all(env, g, out_splits, in_splits), g, rank, dim, counts, sink)

    def gather(g: torch.Tensor) -> prim.Pending:
        """Backward: every rank's gradient in rank order (`all_gather_v`'s result) on wait."""
        full = g.new_empty(sum(counts))
        # Launched first, its work tracked (`_held`); the own gradient is copied while gloo
        # moves the other's, which the waiting node waits for (as `all_gather_v` is).
        work = track(
            dist.all_to_all_single(
                full[at[other] : at[other] + counts[other]],
                g,
                output_split_sizes=in_splits,
                input_split_sizes=out_splits,
                group=env.require_pg(),
                async_op=True,
            )
        )
        full[at[rank] : at[rank] + counts[rank]].copy_(g)
        return prim.Pending(full, work)

    # The backward in two nodes (session 12, s12-rsplit): the gradient exchange is launched by
    # the received tensor's backward and waited for by `send`'s (`prim.split_linked`), so the
    # backward of what ran between this launch and the wait (a DLRM's dense arch) overlaps it.
    return prim.split_linked(env, send, pending, gather if sink is None else pieces)


class _PairSum(prim.Pending):
    """The other rank's chunk for this rank, received into a fresh buffer: on wait, summed in
    place with this rank's own chunk (`mine`, read where it lies)."""

    def __init__(self, received: prim.Pending, mine: torch.Tensor) -> None:
        super().__init__(received.output, received.work)
        self._received = received
        self._mine: torch.Tensor | None = mine

    def wait(self) -> torch.Tensor:
        theirs = self._received.wait()
        if self._mine is not None:
            theirs.add_(self._mine)  # float addition commutes exactly: `mine + theirs` bit for bit
            self._mine = None
        self.work = None
        return theirs


class _Pieces(prim.Pending):
    """The pair path's backward with a sink: the other rank's gradient in flight; on wait, this
    rank's gradient `own` and the received one go to `sink` in row order, and `partial` gets
    zeros (a zero-stride expanded scalar: `reduce_scatter_pooled`'s contract)."""

    def __init__(
        self,
        received: prim.Pending,
        own: torch.Tensor,
        rank: int,
        dim: int,
        counts: Sequence[int],
        sink: GradientSink,
    ) -> None:
        super().__init__(received.output, received.work)
        self._received = received
        self._own = own
        self._rank = rank
        self._dim = dim
        self._counts = list(counts)
        self._sink = sink

    def wait(self) -> torch.Tensor:
        theirs = self._received.wait()
        self.work = None
        own_rows, their_rows = self._own.view(-1, self._dim), theirs.view(-1, self._dim)
        split = self._counts[0] // self._dim
        if self._rank == 0:
            self._sink(split, own_rows, their_rows)
        else:
            self._sink(split, their_rows, own_rows)
        return self._own.new_zeros(()).expand(sum(self._counts))


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
