"""KeyedJaggedTensor all-to-all: send each rank the features (or id buckets) it owns.

Every rank r passes one KJT per destination rank d (`per_rank[d]`), e.g. the features of the
tables d owns (table-wise) or the ids of every feature that fall in d's row block (row-wise).
Rank d receives from every source s a KJT with the same keys as its own `per_rank[d]` and stitches
them into one KJT, feature-major, with the sources' batches side by side:

    sources:   rank 0 sends d  f0: [a] [b c]     rank 1 sends d  f0: [d e]
                               f1: [ ] [x]                       f1: [y]
    rank d receives        f0: [a] [b c] [d e]      (batch = 2 from rank 0 + 1 from rank 1)
                           f1: [ ] [x]   [y]

Steps, all issued at call time: (1) a small int64 header all-to-all carrying each pair's split
sizes, per-key batch sizes and value counts, dtypes and an error flag, waited immediately because
the data sizes depend on it; (2) the lengths, values and (if any rank has them) weights
all-to-alls, left in flight. `wait()` finishes them and regroups from source-major to
feature-major order.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.errors import raise_agreed
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["KJTAllToAllAwaitable", "KJTAllToAllLayout", "kjt_all_to_all"]

_DTYPES = [
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
]
_CODE = {dt: i for i, dt in enumerate(_DTYPES)}
_ERROR, _WEIGHTED, _VARIABLE, _WEIGHT_GRAD = 1, 2, 4, 8
# header per (source, destination) pair: flags, keys hash, values / lengths / weights dtype codes,
# source batch size, value count, then per key: batch size, value count.
_FIXED = 7


@functools.lru_cache(maxsize=1024)
def _keys_hash(keys: tuple[str, ...]) -> int:
    digest = hashlib.sha256("\0".join(keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]) if 0 <= code < len(_DTYPES) else "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KJTAllToAllLayout:
    """What moved where in one KJT all-to-all, from this rank's point of view.

    Known as soon as `kjt_all_to_all` returns (the header exchange is synchronous), so the
    output distribution of the same batch (e.g. `sequence_all_to_all`) can be planned before the
    ids arrive.

    keys: the received KJT's keys (this rank's own `per_rank[rank].keys()`).
    recv_stride_per_key_per_rank: `[F][S]` bags of key f received from rank s.
    recv_values_per_key_per_rank: `[F][S]` ids of key f received from rank s.
    sent_values_per_rank: `[S]` ids this rank sent to rank s.
    sent_stride_per_rank: `[S]` batch size of the KJT this rank sent to rank s.
    variable_batch: whether the received KJT has variable batch per key.
    """

    keys: tuple[str, ...]
    recv_stride_per_key_per_rank: tuple[tuple[int, ...], ...]
    recv_values_per_key_per_rank: tuple[tuple[int, ...], ...]
    sent_values_per_rank: tuple[int, ...]
    sent_stride_per_rank: tuple[int, ...]
    variable_batch: bool

    @property
    def recv_values_per_rank(self) -> list[int]:
        """`[S]` ids received from each rank."""
        if not self.recv_values_per_key_per_rank:
            return [0] * len(self.sent_values_per_rank)
        return [sum(col) for col in zip(*self.recv_values_per_key_per_rank, strict=True)]


class KJTAllToAllAwaitable(Awaitable[KeyedJaggedTensor]):
    """The received KJT once waited; `layout` is available immediately."""

    def __init__(self, layout: KJTAllToAllLayout, finish: _Finish) -> None:
        super().__init__(finish)
        self.layout = layout


class _Finish:
    """Waits for the data all-to-alls and regroups them into the received KJT."""

    def __init__(
        self,
        env: ShardingEnv,
        layout: KJTAllToAllLayout,
        ids: prim.Pending,
        bags: prim.Pending | None,
        lengths_dtype: torch.dtype,
        weights: tuple[prim.Pending, torch.Tensor, bool] | None,
        stride: int,
    ) -> None:
        self.env = env
        self.layout = layout
        self.ids = ids
        self.bags = bags
        self.lengths_dtype = lengths_dtype
        self.weights = weights
        self.stride = stride

    def __call__(self) -> KeyedJaggedTensor:
        layout, env = self.layout, self.env
        world = env.world_size
        n_keys = len(layout.keys)
        bags = [list(c) for c in zip(*layout.recv_stride_per_key_per_rank, strict=True)]
        ids = [list(c) for c in zip(*layout.recv_values_per_key_per_rank, strict=True)]
        if n_keys == 0:
            bags = ids = [[] for _ in range(world)]
        # Received buffers are source-major ([from rank 0: f0, f1, ...][from rank 1: ...]);
        # the KJT layout is key-major, with each key's bags in source-rank order.
        received = self.ids.wait()
        if self.bags is None:
            # lengths and values came in one buffer: [from s: lengths per key, values per key]
            pieces = torch.split(received, [x for s in range(world) for x in bags[s] + ids[s]])
            lengths = _gather(received, pieces, world, n_keys, 0, 2 * n_keys)
            values = _gather(received, pieces, world, n_keys, n_keys, 2 * n_keys)
            if lengths.dtype != self.lengths_dtype:
                lengths = lengths.to(self.lengths_dtype)
        else:
            lengths = prim.transpose_segments(self.bags.wait(), bags)
            values = prim.transpose_segments(received, ids)
        weights: torch.Tensor | None = None
        if self.weights is not None:
            pending, sent, grad = self.weights
            in_splits = list(layout.sent_values_per_rank)
            out_splits = layout.recv_values_per_rank
            weights = prim.link(
                sent,
                pending.wait(),
                lambda g: prim.all_to_all_sync(env, g, out_splits, in_splits),
                grad,
            )
            weights = prim.transpose_segments(weights, ids)
        length_per_key = [sum(row) for row in layout.recv_values_per_key_per_rank]
        keys = list(layout.keys)
        if layout.variable_batch:
            return KeyedJaggedTensor(
                keys,
                values,
                weights=weights,
                lengths=lengths,
                stride_per_key_per_rank=[list(r) for r in layout.recv_stride_per_key_per_rank],
                length_per_key=length_per_key,
            )
        return KeyedJaggedTensor(
            keys,
            values,
            weights=weights,
            lengths=lengths,
            stride=self.stride,
            length_per_key=length_per_key,
        )


def _gather(
    received: torch.Tensor,
    pieces: Sequence[torch.Tensor],
    world: int,
    n_keys: int,
    first: int,
    per_source: int,
) -> torch.Tensor:
    """Key-major concatenation of `pieces[s * per_source + first + f]` (one copy)."""
    parts = [pieces[s * per_source + first + f] for f in range(n_keys) for s in range(world)]
    if not parts:
        return received.new_zeros((0,))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _check_local(per_rank: Sequence[KeyedJaggedTensor]) -> None:
    """Content checks whose failure is reported through the header (so no rank hangs)."""
    first = per_rank[0]
    for d, kjt in enumerate(per_rank):
        if kjt.values().dtype != first.values().dtype:
            raise TypeError(
                f"per_rank[{d}] values have dtype {kjt.values().dtype} but per_rank[0] has "
                f"{first.values().dtype}; every KJT sent must use the same id dtype"
            )
        if kjt.lengths().dtype != first.lengths().dtype:
            raise TypeError(
                f"per_rank[{d}] lengths have dtype {kjt.lengths().dtype} but per_rank[0] has "
                f"{first.lengths().dtype}; every KJT sent must use the same lengths dtype"
            )
        if kjt.device() != first.device():
            raise ValueError(
                f"per_rank[{d}] is on {kjt.device()} but per_rank[0] is on {first.device()}"
            )
    weight_dtypes = {w.dtype for k in per_rank if (w := k.weights_or_none()) is not None}
    if len(weight_dtypes) > 1:
        raise TypeError(
            f"the KJTs sent have weights of several dtypes {sorted(map(str, weight_dtypes))}"
        )


def kjt_all_to_all(
    env: ShardingEnv,
    per_rank: Sequence[KeyedJaggedTensor],
    *,
    error: BaseException | None = None,
) -> KJTAllToAllAwaitable:
    """Send `per_rank[d]` to rank d; receive one KJT stitched from what every rank sent here.

    Sends: `per_rank[d]`, a KJT with F_d keys and batch B_d (or per-key batches), to rank d.
    Every rank must send rank d KJTs with the same keys in the same order.
    Receives: a KJT with this rank's F keys (those of `per_rank[rank]`); key f holds the bags
    from rank 0, then rank 1, ...: `lengths: (sum_f sum_s B[f][s],)`, `values: (N,)`, where
    `B[f][s]` is the batch rank s sent for f. Without variable batch the result has
    `stride() == sum_s B_s`; if any rank sent a variable-batch KJT, the result has
    `stride_per_key_per_rank() == B`. If any rank sent weights, the result is weighted (1.0 for
    ids from ranks that sent none); weights are differentiable (backward: the reverse
    all-to-all).

    `error`: this rank's input error, if any. It travels in the header: when any rank passes
    one (or fails the local checks: mixed dtypes or devices), every rank raises before the data
    moves (the failing rank its own error, the others `PeerError`).

    Raises immediately (without communicating, so the others wait for the process group
    timeout) only on programming errors: `len(per_rank) != world_size` or a non-KJT element.
    A rank whose peers sent keys different from its own raises `ValueError` on that rank only.
    """
    if len(per_rank) != env.world_size:
        raise ValueError(
            f"kjt_all_to_all needs one KJT per rank ({env.world_size}), got {len(per_rank)}"
        )
    for d, kjt in enumerate(per_rank):
        if not isinstance(kjt, KeyedJaggedTensor):
            raise TypeError(f"per_rank[{d}] must be a KeyedJaggedTensor, got {type(kjt).__name__}")
    if error is None:
        try:
            _check_local(per_rank)
        except (TypeError, ValueError) as exc:
            error = exc

    # -- 1. header -------------------------------------------------------------------------
    own = per_rank[env.rank]
    device = own.values().device
    weighted = any(k.weights_or_none() is not None for k in per_rank)
    variable = any(k.variable_stride_per_key() for k in per_rank)
    # Whether weights are differentiable must be one decision for all ranks (backward runs the
    # reverse all-to-all on every rank), so it travels in the header.
    weight_grad = torch.is_grad_enabled() and any(
        w is not None and w.requires_grad
        for k in per_rank
        if (w := k.weights_or_none()) is not None
    )
    per_key: list[tuple[list[int], list[int]]] = []
    for kjt in per_rank:
        try:
            per_key.append((kjt.stride_per_key(), kjt.length_per_key()))
        except (TypeError, ValueError, RuntimeError) as exc:
            error = error or exc
            per_key.append(([0] * len(kjt.keys()), [0] * len(kjt.keys())))
    # Flags and dtype codes are the same in every header this rank sends (decided after all
    # local checks), so every rank learns every rank's values and decides alike.
    flags = (_ERROR if error is not None else 0) | (_WEIGHTED if weighted else 0)
    flags |= (_VARIABLE if variable else 0) | (_WEIGHT_GRAD if weight_grad else 0)
    weight_dtypes = [w.dtype for k in per_rank if (w := k.weights_or_none()) is not None]
    weight_code = _CODE.get(weight_dtypes[0], -1) if weight_dtypes else -1
    values_code = _CODE.get(own.values().dtype, -1)
    lengths_code = _CODE.get(own.lengths().dtype, -1)
    headers = [
        [
            flags,
            _keys_hash(tuple(kjt.keys())),
            values_code,
            lengths_code,
            weight_code,
            kjt.stride(),
            sum(counts),
            *strides,
            *counts,
        ]
        for kjt, (strides, counts) in zip(per_rank, per_key, strict=True)
    ]
    n_own = len(own.keys())
    # Pinned and non-blocking on a GPU: the header's `.tolist()` after the exchange is this
    # all-to-all's one host sync.
    sent = prim.host_to_device(
        torch.tensor([x for h in headers for x in h], dtype=torch.int64), device
    )
    in_splits = [len(h) for h in headers]
    received = prim.all_to_all_sync(env, sent, in_splits, [_FIXED + 2 * n_own] * env.world_size)
    table = received.view(env.world_size, _FIXED + 2 * n_own).tolist()

    failed = [s for s in range(env.world_size) if table[s][0] & _ERROR]
    if failed:
        raise_agreed(env, error, failed)
    # Every rank sends the same dtypes and flags to every destination, so every rank sees the
    # same values here and the checks below raise on all ranks or on none.
    for column, what in ((2, "values"), (3, "lengths")):
        codes = [row[column] for row in table]
        if len(set(codes)) > 1:
            raise TypeError(
                f"ranks disagree on the {what} dtype of the KJTs they send: "
                f"{[_dtype_name(c) for c in codes]} (rank order); use one dtype on every rank"
            )
    weight_codes = {row[4] for row in table if row[4] >= 0}
    if len(weight_codes) > 1:  # (ranks without weights send -1)
        raise TypeError(
            f"ranks disagree on the weights dtype: {[_dtype_name(row[4]) for row in table]}"
        )
    own_hash = _keys_hash(tuple(own.keys()))
    for s, row in enumerate(table):
        if row[1] != own_hash:
            raise ValueError(
                f"rank {s} sent rank {env.rank} a KJT whose keys differ from this rank's own "
                f"keys {own.keys()}; every rank must send rank {env.rank} the same keys"
            )
    any_weighted = any(row[0] & _WEIGHTED for row in table)
    any_variable = any(row[0] & _VARIABLE for row in table)
    any_weight_grad = any(row[0] & _WEIGHT_GRAD for row in table)

    recv_strides = [[table[s][_FIXED + f] for s in range(env.world_size)] for f in range(n_own)]
    recv_counts = [
        [table[s][_FIXED + n_own + f] for s in range(env.world_size)] for f in range(n_own)
    ]
    layout = KJTAllToAllLayout(
        keys=tuple(own.keys()),
        recv_stride_per_key_per_rank=tuple(tuple(r) for r in recv_strides),
        recv_values_per_key_per_rank=tuple(tuple(r) for r in recv_counts),
        sent_values_per_rank=tuple(h[6] for h in headers),
        sent_stride_per_rank=tuple(h[5] for h in headers),
        variable_batch=any_variable,
    )

    # -- 2. data ---------------------------------------------------------------------------
    world = env.world_size
    ids_in = [k.values().numel() for k in per_rank]
    ids_out = [table[s][6] for s in range(world)]
    bags_in = [k.lengths().numel() for k in per_rank]
    bags_out = [sum(table[s][_FIXED : _FIXED + n_own]) for s in range(world)]
    values_dtype = own.values().dtype
    lengths_dtype = own.lengths().dtype
    bags_pending: prim.Pending | None = None
    if not values_dtype.is_floating_point and not lengths_dtype.is_floating_point:
        # Integer ids: lengths travel in the same buffer as the ids (one all-to-all fewer),
        # as [to d: lengths, ids] per destination, cast to the ids' dtype for the trip.
        parts = [t for k in per_rank for t in (k.lengths().to(values_dtype), k.values())]
        in_splits = [b + n for b, n in zip(bags_in, ids_in, strict=True)]
        out_splits = [b + n for b, n in zip(bags_out, ids_out, strict=True)]
        ids_pending = prim.all_to_all(env, _cat(parts), in_splits, out_splits)
    else:
        bags_pending = prim.all_to_all(
            env, _cat([k.lengths() for k in per_rank]), bags_in, bags_out
        )
        ids_pending = prim.all_to_all(env, _cat([k.values() for k in per_rank]), ids_in, ids_out)
    weights: tuple[prim.Pending, torch.Tensor, bool] | None = None
    if any_weighted:
        w_dtype = _DTYPES[weight_codes.pop()]
        send_w = _cat([_weights_or_ones(k, w_dtype) for k in per_rank])
        pending_w = prim.all_to_all(env, send_w.detach(), ids_in, ids_out)
        weights = (pending_w, send_w, any_weight_grad)
    stride = sum(table[s][5] for s in range(world))
    finish = _Finish(env, layout, ids_pending, bags_pending, lengths_dtype, weights, stride)
    return KJTAllToAllAwaitable(layout, finish)


def _weights_or_ones(kjt: KeyedJaggedTensor, dtype: torch.dtype) -> torch.Tensor:
    w = kjt.weights_or_none()
    if w is not None:
        return w
    return torch.ones((), dtype=dtype, device=kjt.device()).expand(kjt.values().numel())


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)
