"""TorchRec's communication modules (`torchrec.distributed.dist_data`) over our collectives.

Each class has TorchRec 1.8's constructor and `forward` signature and returns what TorchRec
returns, so code written against TorchRec's modules runs unchanged; the data movement is the
differentiable collective of this package named in each docstring. Shapes follow TorchRec:

    KJTAllToAll(pg, splits)                 KJT (keys grouped by destination) -> awaitable of an
                                            awaitable of the KJT of this rank's keys
    PooledEmbeddingsAllToAll(pg, dims)      (sum_s B_s, D_rank) -> (B_rank, sum_r D_r)
    PooledEmbeddingsReduceScatter(pg)       (sum_s B_s, D) -> (B_rank, D), summed over ranks
    PooledEmbeddingsAllGather(pg)           (B, D) -> (world * B, D)
    SequenceEmbeddingsAllToAll(pg, feats)   (N_recv, D) -> (N_sent, D)
    KJTOneToAll(splits, world_size)         KJT -> one KJT per device (no communication)
    EmbeddingsAllToOne / ...Reduce          list of tensors -> one tensor (no communication)

Quantized communication codecs (`codecs=`, `qcomm.QuantizedCommCodecs`) are applied by
`PooledEmbeddingsAllToAll`, `PooledEmbeddingsReduceScatter` (both also in their variable-batch
forms, dist_data_vb.py) and `SequenceEmbeddingsAllToAll`; the other modules refuse them with a
`ValueError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from shardrec_collectives import qcomm
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.gather import all_gather_pooled
from shardrec_collectives.kjt_all_to_all import (
    ExchangeCapacity,
    KeySelection,
    KJTAllToAllAwaitable,
    kjt_all_to_all,
)
from shardrec_collectives.pooled import pooled_all_to_all
from shardrec_collectives.reduce_scatter import reduce_scatter_pooled
from shardrec_collectives.sequence import sequence_all_to_all_by_counts
from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "EmbeddingsAllToOne",
    "EmbeddingsAllToOneReduce",
    "KJTAllToAll",
    "KJTAllToAllSplitsAwaitable",
    "KJTOneToAll",
    "PooledEmbeddingsAllGather",
    "PooledEmbeddingsAllToAll",
    "PooledEmbeddingsAwaitable",
    "PooledEmbeddingsReduceScatter",
    "SeqEmbeddingsAllToOne",
    "SequenceEmbeddingsAllToAll",
    "SequenceEmbeddingsAwaitable",
]

TensorCallback = Callable[[torch.Tensor], torch.Tensor]


class _EmbeddingsComm(nn.Module):
    """What every embeddings communication module keeps: its process group and device (None:
    the input's); TorchRec's quantized communication `codecs` are refused."""

    def __init__(
        self,
        pg: dist.ProcessGroup,
        device: torch.device | None = None,
        codecs: object | None = None,
    ) -> None:
        super().__init__()
        if codecs is not None:
            raise ValueError(
                f"{type(self).__name__}(codecs={codecs!r}): quantized communication codecs are "
                "not supported; pass codecs=None (embeddings travel in their own dtype)"
            )
        self._pg = pg
        self._device = device


def _one_per_rank(name: str, values: Sequence[object], pg: dist.ProcessGroup) -> None:
    if len(values) != pg.size():
        raise ValueError(
            f"{name} {list(values)} has {len(values)} entries; it needs one per rank of the "
            f"process group ({pg.size()})"
        )


def _env(pg: dist.ProcessGroup, device: torch.device | None = None) -> ShardingEnv:
    return ShardingEnv.from_process_group(pg, device)


def _even_split(what: str, rows: int, world: int) -> list[int]:
    if rows % world != 0:
        raise ValueError(
            f"{what} has {rows} rows, which {world} ranks cannot split evenly; pass the rows "
            "per rank explicitly"
        )
    return [rows // world] * world


class PooledEmbeddingsAwaitable(Awaitable[torch.Tensor]):
    """The pooled embeddings of a collective; `callbacks` run on the tensor when waited."""

    def __init__(self, tensor_awaitable: Awaitable[torch.Tensor]) -> None:
        super().__init__()
        self._tensor_awaitable = tensor_awaitable

    def _wait_impl(self) -> torch.Tensor:
        return self._tensor_awaitable.wait()


class SequenceEmbeddingsAwaitable(Awaitable[torch.Tensor]):
    """Sequence embeddings after the all-to-all, reordered by `unbucketize_permute_tensor`.

    unbucketize_permute_tensor: `(N,)`, row i of the result is row `perm[i]` of the received
    rows (row-wise sharding's bucketize order back to the input order); None keeps the order.
    """

    def __init__(
        self,
        tensor_awaitable: Awaitable[torch.Tensor],
        unbucketize_permute_tensor: torch.Tensor | None,
        embedding_dim: int,
    ) -> None:
        super().__init__()
        self._tensor_awaitable = tensor_awaitable
        if unbucketize_permute_tensor is not None:
            perm = unbucketize_permute_tensor
            self.callbacks.append(
                lambda t: torch.index_select(t.view(-1, embedding_dim), 0, perm.long())
            )

    def _wait_impl(self) -> torch.Tensor:
        return self._tensor_awaitable.wait()


class KJTAllToAllSplitsAwaitable(Awaitable[KJTAllToAllAwaitable]):
    """TorchRec's first stage: waiting gives the awaitable of the KJT (`.wait().wait()`).

    Our exchange learns its sizes when it starts, so the first `wait()` returns at once.
    """

    nests = True

    def __init__(self, tensors_awaitable: KJTAllToAllAwaitable) -> None:
        super().__init__()
        self._tensors_awaitable = tensors_awaitable

    def _wait_impl(self) -> KJTAllToAllAwaitable:
        return self._tensors_awaitable


class KJTAllToAll(nn.Module):
    """Send each rank its consecutive block of the input KJT's keys (`kjt_all_to_all`).

    pg: the process group. splits: `[S]`, how many keys (in key order) go to each rank; the
    same on every rank. stagger: only 1 (TorchRec uses other values for its own two-level
    sharding; ours regroups by host with `split_by_host`).

    `forward(kjt)` with `len(kjt.keys()) == sum(splits)` returns an awaitable whose `wait()`
    returns a `KJTAllToAllAwaitable`, whose `wait()` returns the KJT of this rank's keys with
    every rank's batch side by side (rank 0's bags first). `.layout` on the second awaitable
    gives the id counts sent and received (the splits `SequenceEmbeddingsAllToAll` needs).
    """

    def __init__(self, pg: dist.ProcessGroup, splits: list[int], stagger: int = 1) -> None:
        super().__init__()
        _one_per_rank("splits", splits, pg)
        if any(s < 0 for s in splits):
            raise ValueError(f"splits {list(splits)} must be >= 0 keys per rank")
        if stagger != 1:
            raise ValueError(
                f"stagger={stagger} is not supported, only 1: shardrec's table_row_wise "
                "sharding regroups ranks by host with split_by_host instead"
            )
        self._pg = pg
        self._splits = list(splits)
        self._splits_cumsum = [0, *itertools.accumulate(self._splits)]
        self._stagger = stagger
        # Learns the ids' bytes per pair of ranks: from the second call of a similar size on,
        # the ids travel with their header in one exchange.
        self._capacity = ExchangeCapacity()

    def forward(self, input: KeyedJaggedTensor) -> KJTAllToAllSplitsAwaitable:
        if len(input.keys()) != self._splits_cumsum[-1]:
            raise ValueError(
                f"the KJT has {len(input.keys())} keys {input.keys()} but splits "
                f"{self._splits} send {self._splits_cumsum[-1]}; the counts must agree"
            )
        env = _env(self._pg, input.device())
        c = self._splits_cumsum
        picked = [list(range(c[d], c[d + 1])) for d in range(len(self._splits))]
        # Unlike TorchRec (which runs this under no_grad), weights stay differentiable.
        sent = kjt_all_to_all(
            env, KeySelection(features=input, keys_per_rank=picked), capacity=self._capacity
        )
        return KJTAllToAllSplitsAwaitable(sent)


class KJTOneToAll(nn.Module):
    """Split a KJT's keys into `world_size` consecutive groups, one per device (no collective).

    splits: `[world_size]` keys per device. device: the type of device the pieces go to
    (`cuda`: piece r to `cuda:r`; CPU or None: they stay on the CPU; meta: not moved).
    `forward(kjt)` returns the list of pieces.
    """

    def __init__(
        self, splits: list[int], world_size: int, device: torch.device | None = None
    ) -> None:
        super().__init__()
        if len(splits) != world_size:
            raise ValueError(
                f"splits {list(splits)} has {len(splits)} entries but world_size is "
                f"{world_size}; give one entry per device"
            )
        self._splits = list(splits)
        self._world_size = world_size
        self._device_type = "cpu" if device is None else device.type

    def forward(self, kjt: KeyedJaggedTensor) -> list[KeyedJaggedTensor]:
        if len(kjt.keys()) != sum(self._splits):
            raise ValueError(
                f"the KJT has {len(kjt.keys())} keys but splits {self._splits} sum to "
                f"{sum(self._splits)}"
            )
        pieces = kjt.split(self._splits)
        if self._device_type in ("cpu", "meta"):
            return pieces
        return [
            p.to(torch.device(self._device_type, r), non_blocking=True)
            for r, p in enumerate(pieces)
        ]


class PooledEmbeddingsAllToAll(_EmbeddingsComm):
    """Pooled rows back to the ranks that own the samples (`pooled_all_to_all`).

    dim_sum_per_rank: `[D_r]` width of each rank's tables. `forward(local_embs,
    batch_size_per_rank=None)`: `local_embs (sum_s B_s, D_rank)`, batches even when not given;
    the awaitable gives `(B_rank, sum_r D_r)` after running the module's `callbacks`.
    """

    def __init__(
        self,
        pg: dist.ProcessGroup,
        dim_sum_per_rank: list[int],
        device: torch.device | None = None,
        callbacks: list[TensorCallback] | None = None,
        codecs: object | None = None,
    ) -> None:
        super().__init__(pg, device)
        # Quantized payload and gradient (qcomm.QuantizedCommCodecs); None: exact.
        self._codecs = qcomm.checked_codecs(codecs, type(self).__name__)
        self._dim_sum_per_rank = list(dim_sum_per_rank)
        self._callbacks: list[TensorCallback] = [] if callbacks is None else callbacks

    @property
    def callbacks(self) -> list[TensorCallback]:
        return self._callbacks

    def forward(
        self, local_embs: torch.Tensor, batch_size_per_rank: list[int] | None = None
    ) -> PooledEmbeddingsAwaitable:
        env = _env(self._pg, self._device or local_embs.device)
        if not batch_size_per_rank:
            batch_size_per_rank = _even_split("local_embs", local_embs.shape[0], env.world_size)
        out = PooledEmbeddingsAwaitable(
            pooled_all_to_all(
                env, local_embs, batch_size_per_rank, self._dim_sum_per_rank, self._codecs
            )
        )
        out.callbacks.extend(self._callbacks)
        return out


class PooledEmbeddingsReduceScatter(_EmbeddingsComm):
    """Sum partial pooled rows over ranks, each rank keeping its own (`reduce_scatter_pooled`).

    `forward(local_embs, input_splits=None)`: `local_embs (sum_s B_s, D)`, `input_splits` the
    rows `[B_s]` of each rank (even when not given); the awaitable gives `(B_rank, D)`.
    """

    def __init__(self, pg: dist.ProcessGroup, codecs: object | None = None) -> None:
        super().__init__(pg)
        # Quantized chunks and gradient (qcomm.QuantizedCommCodecs); None: exact.
        self._codecs = qcomm.checked_codecs(codecs, type(self).__name__)

    def forward(
        self, local_embs: torch.Tensor, input_splits: list[int] | None = None
    ) -> PooledEmbeddingsAwaitable:
        env = _env(self._pg, local_embs.device)
        if not input_splits:
            input_splits = _even_split("local_embs", local_embs.shape[0], env.world_size)
        return PooledEmbeddingsAwaitable(
            reduce_scatter_pooled(env, local_embs, input_splits, self._codecs)
        )


class PooledEmbeddingsAllGather(_EmbeddingsComm):
    """Every rank's rows on every rank (`all_gather_pooled`).

    `forward(local_emb)`: `local_emb (B, D)`, the same shape on every rank; the awaitable gives
    `(world * B, D)`, rank 0's rows first.
    """

    def __init__(self, pg: dist.ProcessGroup, codecs: object | None = None) -> None:
        super().__init__(pg, codecs=codecs)

    def forward(self, local_emb: torch.Tensor) -> PooledEmbeddingsAwaitable:
        env = _env(self._pg, local_emb.device)
        if local_emb.dim() != 2:
            raise ValueError(f"local_emb must be (B, D), got shape {tuple(local_emb.shape)}")
        batches = [local_emb.shape[0]] * env.world_size
        return PooledEmbeddingsAwaitable(all_gather_pooled(env, local_emb, batches))


class SequenceEmbeddingsAllToAll(_EmbeddingsComm):
    """One embedding per id back to the rank that sent the id (`sequence_all_to_all`).

    features_per_rank: `[F_r]` keys each rank received in the `KJTAllToAll`.
    `forward(local_embs, lengths, input_splits, output_splits, unbucketize_permute_tensor=None,
    batch_size_per_rank=None)`:
        local_embs: `(N_recv, D)`, one row per id of the received KJT (its value order).
        lengths: that KJT's lengths, `(F_rank * sum_s B_s,)` or, as TorchRec passes them,
            `(F_rank, sum_s B_s)`. batch_size_per_rank: `[B_s]` (even when not given).
        input_splits: `[S]` the KJT all-to-all's input splits: ids this rank sent each rank
            (rows coming back). output_splits: its output splits: ids received from each rank
            (rows going back to it).
    The awaitable gives `(N_sent, D)`, in the order this rank's input KJT held the ids.
    """

    def __init__(
        self,
        pg: dist.ProcessGroup,
        features_per_rank: list[int],
        device: torch.device | None = None,
        codecs: object | None = None,
    ) -> None:
        super().__init__(pg, device)
        # Quantized rows and gradient (qcomm.QuantizedCommCodecs); None: exact.
        self._codecs = qcomm.checked_codecs(codecs, type(self).__name__)
        _one_per_rank("features_per_rank", features_per_rank, pg)
        self._local_split = features_per_rank[dist.get_rank(pg)]

    def forward(
        self,
        local_embs: torch.Tensor,
        lengths: torch.Tensor,
        input_splits: list[int],
        output_splits: list[int],
        unbucketize_permute_tensor: torch.Tensor | None = None,
        batch_size_per_rank: list[int] | None = None,
        sparse_features_recat: torch.Tensor | None = None,
    ) -> SequenceEmbeddingsAwaitable:
        if sparse_features_recat is not None:
            raise ValueError(
                "sparse_features_recat is not supported: the KJT from KJTAllToAll is already "
                "in key order; pass batch_size_per_rank for variable batches instead"
            )
        env = _env(self._pg, self._device or local_embs.device)
        world, keys = env.world_size, self._local_split
        for name, splits in (("input_splits", input_splits), ("output_splits", output_splits)):
            if len(splits) != world:
                raise ValueError(f"{name} {list(splits)} needs one entry per rank ({world})")
        if not batch_size_per_rank:
            per_key = lengths.numel() // keys if keys else 0
            batch_size_per_rank = _even_split("each key of lengths", per_key, world)
        counts = _counts_per_key_per_rank(lengths, keys, batch_size_per_rank)
        received = [sum(col) for col in zip(*counts, strict=True)] if counts else [0] * world
        if received != list(output_splits):
            raise ValueError(
                f"output_splits {list(output_splits)} disagrees with the ids per rank in lengths "
                f"{received}; pass the splits of the same KJTAllToAll"
            )
        moved = sequence_all_to_all_by_counts(env, local_embs, counts, input_splits, self._codecs)
        return SequenceEmbeddingsAwaitable(moved, unbucketize_permute_tensor, local_embs.shape[1])


def _counts_per_key_per_rank(
    lengths: torch.Tensor, keys: int, batch_size_per_rank: Sequence[int]
) -> list[list[int]]:
    """`[F][S]` ids per (key, source rank) of a received KJT's `lengths`."""
    bags = [b for _ in range(keys) for b in batch_size_per_rank]
    if lengths.numel() != sum(bags):
        raise ValueError(
            f"lengths has {lengths.numel()} bags but {keys} keys x batch_size_per_rank "
            f"{list(batch_size_per_rank)} make {sum(bags)}"
        )
    ends = torch.cumsum(lengths.reshape(-1).long(), 0)
    bounds = torch.tensor([0, *itertools.accumulate(bags)], dtype=torch.long)
    totals = torch.cat([ends.new_zeros(1), ends])[bounds.to(ends.device)]
    sums = (totals[1:] - totals[:-1]).tolist()
    world = len(batch_size_per_rank)
    return [sums[f * world : (f + 1) * world] for f in range(keys)]


class _ToOneDevice(nn.Module):
    """Per-device tensors merged on `device` (inference's all-to-one, no collective)."""

    def __init__(self, device: torch.device, world_size: int) -> None:
        super().__init__()
        self._device = device
        self._world_size = world_size

    def set_device(self, device_str: str) -> None:
        self._device = torch.device(device_str)

    def _check(self, tensors: list[torch.Tensor], *, exact: bool) -> None:
        bad = (
            len(tensors) != self._world_size if exact else not 0 < len(tensors) <= self._world_size
        )
        if bad:
            wanted = "world_size" if exact else "1..world_size"
            raise ValueError(f"got {len(tensors)} tensors; expected {wanted} ({self._world_size})")


class EmbeddingsAllToOne(_ToOneDevice):
    """Concatenate per-device tensors along `cat_dim` on `device` (no collective)."""

    def __init__(self, device: torch.device, world_size: int, cat_dim: int) -> None:
        super().__init__(device, world_size)
        self._cat_dim = cat_dim

    def forward(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        self._check(tensors, exact=False)
        return torch.cat([t.to(self._device) for t in tensors], self._cat_dim)


class EmbeddingsAllToOneReduce(_ToOneDevice):
    """Sum per-device tensors of one shape on `device` (no collective)."""

    def forward(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        self._check(tensors, exact=True)
        return torch.stack([t.to(self._device) for t in tensors]).sum(0)


class SeqEmbeddingsAllToOne(_ToOneDevice):
    """Move per-device sequence embeddings to `device`, kept as a list (no collective)."""

    def forward(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        self._check(tensors, exact=False)
        return [t.to(self._device) for t in tensors]
