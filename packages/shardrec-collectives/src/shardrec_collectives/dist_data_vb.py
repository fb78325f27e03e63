"""TorchRec's variable-batch communication modules (`torchrec.distributed.dist_data`).

With variable batch per feature, rank s has `B_s[f]` samples of feature f. TorchRec's modules
take their inputs in rank-major order (what its variable-batch lookups produce), where our
functions `variable_batch_pooled_all_to_all` / `variable_batch_reduce_scatter_pooled` take the
feature-major order of our lookups; these modules run the same collectives on TorchRec's layout:

    VariableBatchPooledEmbeddingsAllToAll input on rank r (owning features j of widths D_j):
        [to rank 0: for j, B_0[j] x D_j values][to rank 1: ...] ...
    output: [from rank 0: for rank 0's features j, B_rank[j] x D_j][from rank 1: ...] ...

    VariableBatchPooledEmbeddingsReduceScatter input (same on every rank in shape):
        [rank 0's samples: for f, B_0[f] x D_f][rank 1's samples: ...] ...
    output on rank r: [for f, B_r[f] x D_f], summed over ranks
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from shardrec_collectives import _checks, qcomm
from shardrec_collectives import _primitives as prim
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.dist_data import (
    PooledEmbeddingsAwaitable,
    TensorCallback,
    _EmbeddingsComm,
    _one_per_rank,
)
from shardrec_collectives.env import ShardingEnv

__all__ = ["VariableBatchPooledEmbeddingsAllToAll", "VariableBatchPooledEmbeddingsReduceScatter"]


def _sizes(what: str, batches: Sequence[Sequence[int]], dims: Sequence[int]) -> list[int]:
    """`[r]` values of block r: `sum_f batches[r][f] * dims[f]`."""
    out = []
    for r, row in enumerate(batches):
        if len(row) != len(dims):
            raise ValueError(
                f"{what}[{r}] = {list(row)} needs one batch size per feature "
                f"({len(dims)}: widths {list(dims)})"
            )
        _checks.non_negative(f"{what}[{r}]", row)
        out.append(sum(b * d for b, d in zip(row, dims, strict=True)))
    return out


class VariableBatchPooledEmbeddingsAllToAll(_EmbeddingsComm):
    """Pooled rows of variable-batch features back to the ranks that own the samples.

    emb_dim_per_rank_per_feature: `[r][j]` width of rank r's feature j (same on every rank).
    `forward(local_embs, batch_size_per_rank_per_feature, batch_size_per_feature_pre_a2a)`:
        local_embs: 1-D, rank-major (module docstring).
        batch_size_per_rank_per_feature: `[d][j]`, rows of this rank's feature j for rank d.
        batch_size_per_feature_pre_a2a: this rank's batch for every rank's features, flat in
            rank order (rank 0's features, then rank 1's, ...).
    The awaitable gives the 1-D received values (module docstring) after the `callbacks`.
    Backward: the reverse all-to-all.
    codecs: `qcomm.QuantizedCommCodecs` (as `PooledEmbeddingsAllToAll`'s): each destination's
        segment encoded on its own, forward (the rows) and backward (their gradient); None: exact.
    """

    def __init__(
        self,
        pg: dist.ProcessGroup,
        emb_dim_per_rank_per_feature: list[list[int]],
        device: torch.device | None = None,
        callbacks: list[TensorCallback] | None = None,
        codecs: object | None = None,
    ) -> None:
        super().__init__(pg, device)
        # Quantized payload and gradient (qcomm.QuantizedCommCodecs); None: exact.
        self._codecs = qcomm.checked_codecs(codecs, type(self).__name__)
        _one_per_rank("emb_dim_per_rank_per_feature", emb_dim_per_rank_per_feature, pg)
        self._dims = [list(row) for row in emb_dim_per_rank_per_feature]
        self._callbacks: list[TensorCallback] = [] if callbacks is None else callbacks

    @property
    def callbacks(self) -> list[TensorCallback]:
        return self._callbacks

    def forward(
        self,
        local_embs: torch.Tensor,
        batch_size_per_rank_per_feature: list[list[int]],
        batch_size_per_feature_pre_a2a: list[int],
    ) -> PooledEmbeddingsAwaitable:
        env = ShardingEnv.from_process_group(self._pg, self._device or local_embs.device)
        _checks.per_rank(env, "batch_size_per_rank_per_feature", batch_size_per_rank_per_feature)
        _checks.floating("local_embs", local_embs)
        in_splits = _sizes(
            "batch_size_per_rank_per_feature",
            batch_size_per_rank_per_feature,
            self._dims[env.rank],
        )
        flat_dims = [d for row in self._dims for d in row]
        if len(batch_size_per_feature_pre_a2a) != len(flat_dims):
            raise ValueError(
                f"batch_size_per_feature_pre_a2a has {len(batch_size_per_feature_pre_a2a)} "
                f"entries; it needs one per feature of every rank ({len(flat_dims)})"
            )
        _checks.non_negative("batch_size_per_feature_pre_a2a", batch_size_per_feature_pre_a2a)
        out_splits, start = [], 0
        for row in self._dims:
            pre = batch_size_per_feature_pre_a2a[start : start + len(row)]
            out_splits.append(sum(b * d for b, d in zip(pre, row, strict=True)))
            start += len(row)
        _checks.shape(
            "local_embs", local_embs, (sum(in_splits),), f"values per destination {in_splits}"
        )
        if self._codecs is None:
            receive = prim.linked_all_to_all(env, local_embs, in_splits, out_splits)
        else:  # encoded before the send, decoded after the receive (forward and backward)
            receive = qcomm.linked_all_to_all(env, local_embs, in_splits, out_splits, self._codecs)
        out = PooledEmbeddingsAwaitable(Awaitable(receive))
        out.callbacks.extend(self._callbacks)
        return out


class VariableBatchPooledEmbeddingsReduceScatter(_EmbeddingsComm):
    """Sum variable-batch partial pooled rows over ranks; each rank keeps its samples' rows.

    `forward(local_embs, batch_size_per_rank_per_feature, embedding_dims)`:
        local_embs: 1-D, rank-major (module docstring), the same size on every rank.
        batch_size_per_rank_per_feature: `[r][f]` samples of rank r for feature f.
        embedding_dims: `[f]` widths.
    The awaitable gives this rank's summed block. Backward: all-gather of the gradient.
    """

    def __init__(self, pg: dist.ProcessGroup, codecs: object | None = None) -> None:
        super().__init__(pg)
        # Quantized chunks and gradient (qcomm.QuantizedCommCodecs); None: exact.
        self._codecs = qcomm.checked_codecs(codecs, type(self).__name__)

    def forward(
        self,
        local_embs: torch.Tensor,
        batch_size_per_rank_per_feature: list[list[int]],
        embedding_dims: list[int],
    ) -> PooledEmbeddingsAwaitable:
        env = ShardingEnv.from_process_group(self._pg, local_embs.device)
        _checks.per_rank(env, "batch_size_per_rank_per_feature", batch_size_per_rank_per_feature)
        _checks.non_negative("embedding_dims", embedding_dims)
        _checks.floating("local_embs", local_embs)
        counts = _sizes(
            "batch_size_per_rank_per_feature", batch_size_per_rank_per_feature, embedding_dims
        )
        _checks.shape("local_embs", local_embs, (sum(counts),), f"values per rank {counts}")
        if self._codecs is None:
            receive = prim.linked_reduce_scatter_v(env, local_embs, counts)
        else:
            receive = qcomm.linked_reduce_scatter(env, local_embs, counts, self._codecs)
        return PooledEmbeddingsAwaitable(Awaitable(receive))
