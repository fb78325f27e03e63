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

A `KeySelection` input is the same exchange for the common case where every destination gets
some keys of one KJT: the send buffer is built from views of that KJT's per-key segments, so
the ids are copied once on the way out (by the `torch.cat` that builds the buffer) instead of
once per selected KJT and again into the buffer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives._kjt_send import KeySelection, Prepared, from_kjts, from_selection
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.errors import raise_agreed
from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "KJTAllToAllAwaitable",
    "KJTAllToAllLayout",
    "KeySelection",
    "kjt_all_to_all",
]

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


@dataclasses.dataclass(frozen=True)
class _Finish:
    """Waits for the data all-to-alls and regroups them into the received KJT.

    ids: the values (and, when `bags` is None, the lengths) in flight. weights: (in flight,
    the sent weights, whether they need a gradient), or None.
    """

    env: ShardingEnv
    layout: KJTAllToAllLayout
    ids: prim.Pending
    bags: prim.Pending | None
    lengths_dtype: torch.dtype
    weights: tuple[prim.Pending, torch.Tensor, bool] | None
    stride: int

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


def kjt_all_to_all(
    env: ShardingEnv,
    per_rank: Sequence[KeyedJaggedTensor] | KeySelection,
    *,
    error: BaseException | None = None,
) -> KJTAllToAllAwaitable:
    """Send `per_rank[d]` to rank d; receive one KJT stitched from what every rank sent here.

    Sends: `per_rank[d]`, a KJT with F_d keys and batch B_d (or per-key batches), to rank d.
    Every rank must send rank d KJTs with the same keys in the same order. `per_rank` may be a
    `KeySelection` (keys of one KJT per rank, sent with one copy of the ids).
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
    timeout) only on programming errors: `len(per_rank) != world_size` (or as many key lists)
    or a non-KJT element. A rank whose peers sent keys different from its own raises
    `ValueError` on that rank only.
    """
    if isinstance(per_rank, KeySelection):
        if len(per_rank.keys_per_rank) != env.world_size:
            raise ValueError(
                f"kjt_all_to_all needs one key list per rank ({env.world_size}), "
                f"got {len(per_rank.keys_per_rank)}"
            )
        if per_rank.features.variable_stride_per_key():
            per_rank = per_rank.permuted()
    if isinstance(per_rank, KeySelection):
        prepared = from_selection(per_rank, error)
    else:
        prepared = from_kjts(env, per_rank, error)
    error = prepared.error

    # -- 1. header -------------------------------------------------------------------------
    device = prepared.values.device
    headers = _headers(prepared)
    own_keys = prepared.sends[env.rank].keys
    n_own = len(own_keys)
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
    _check_headers(env, table, own_keys)
    any_variable = any(row[0] & _VARIABLE for row in table)
    recv_strides = [[table[s][_FIXED + f] for s in range(env.world_size)] for f in range(n_own)]
    recv_counts = [
        [table[s][_FIXED + n_own + f] for s in range(env.world_size)] for f in range(n_own)
    ]
    layout = KJTAllToAllLayout(
        keys=own_keys,
        recv_stride_per_key_per_rank=tuple(tuple(r) for r in recv_strides),
        recv_values_per_key_per_rank=tuple(tuple(r) for r in recv_counts),
        sent_values_per_rank=tuple(h[6] for h in headers),
        sent_stride_per_rank=tuple(h[5] for h in headers),
        variable_batch=any_variable,
    )
    # -- 2. data ---------------------------------------------------------------------------
    finish = _send_data(env, prepared, layout, table)
    return KJTAllToAllAwaitable(layout, finish)


def _headers(prepared: Prepared) -> list[list[int]]:
    """One header per destination (layout above `_FIXED`)."""
    # Flags and dtype codes are the same in every header this rank sends (decided after all
    # local checks), so every rank learns every rank's values and decides alike.
    flags = (_ERROR if prepared.error is not None else 0) | (
        _WEIGHTED if prepared.weight_dtype is not None else 0
    )
    flags |= (_VARIABLE if prepared.variable else 0) | (_WEIGHT_GRAD if prepared.weight_grad else 0)
    wd = prepared.weight_dtype
    weight_code = _CODE.get(wd, -1) if wd is not None else -1
    values_code = _CODE.get(prepared.values.dtype, -1)
    lengths_code = _CODE.get(prepared.lengths_dtype, -1)
    return [
        [
            flags,
            _keys_hash(o.keys),
            values_code,
            lengths_code,
            weight_code,
            o.stride,
            sum(o.counts),
            *o.strides,
            *o.counts,
        ]
        for o in prepared.sends
    ]


def _check_headers(env: ShardingEnv, table: list[list[int]], own_keys: tuple[str, ...]) -> None:
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
    own_hash = _keys_hash(own_keys)
    for s, row in enumerate(table):
        if row[1] != own_hash:
            raise ValueError(
                f"rank {s} sent rank {env.rank} a KJT whose keys differ from this rank's own "
                f"keys {list(own_keys)}; every rank must send rank {env.rank} the same keys"
            )


def _send_data(
    env: ShardingEnv, prepared: Prepared, layout: KJTAllToAllLayout, table: list[list[int]]
) -> _Finish:
    """Launch the lengths / ids (and weights) all-to-alls; the `_Finish` that waits for them."""
    world = env.world_size
    n_own = len(layout.keys)
    sends = prepared.sends
    values = prepared.values
    device = values.device
    ids_in = [sum(o.counts) for o in sends]
    ids_out = [table[s][6] for s in range(world)]
    bags_in = [sum(o.strides) for o in sends]
    bags_out = [sum(table[s][_FIXED : _FIXED + n_own]) for s in range(world)]
    values_dtype = values.dtype
    lengths_dtype = prepared.lengths_dtype
    bags_pending: prim.Pending | None = None
    if not values_dtype.is_floating_point and not lengths_dtype.is_floating_point:
        # Integer ids: lengths travel in the same buffer as the ids (one all-to-all fewer),
        # as [to d: lengths, ids] per destination, cast to the ids' dtype for the trip.
        parts = [t for o in sends for t in (*(x.to(values_dtype) for x in o.lengths), *o.values)]
        in_splits = [b + n for b, n in zip(bags_in, ids_in, strict=True)]
        out_splits = [b + n for b, n in zip(bags_out, ids_out, strict=True)]
        ids_pending = prim.all_to_all(env, _cat(parts, values), in_splits, out_splits)
    else:
        lengths_like = torch.empty(0, dtype=lengths_dtype, device=device)
        bags_pending = prim.all_to_all(
            env, _cat([x for o in sends for x in o.lengths], lengths_like), bags_in, bags_out
        )
        ids_pending = prim.all_to_all(
            env, _cat([x for o in sends for x in o.values], values), ids_in, ids_out
        )
    weights: tuple[prim.Pending, torch.Tensor, bool] | None = None
    weight_codes = {row[4] for row in table if row[4] >= 0}
    if any(row[0] & _WEIGHTED for row in table):
        w_dtype = _DTYPES[weight_codes.pop()]
        send_w = _cat(
            [
                x
                for o, n in zip(sends, ids_in, strict=True)
                for x in (o.weights if o.weights is not None else [_ones(n, w_dtype, device)])
            ],
            _ones(0, w_dtype, device),
        )
        pending_w = prim.all_to_all(env, send_w.detach(), ids_in, ids_out)
        weights = (pending_w, send_w, any(row[0] & _WEIGHT_GRAD for row in table))
    stride = sum(table[s][5] for s in range(world))
    return _Finish(env, layout, ids_pending, bags_pending, lengths_dtype, weights, stride)


def _ones(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.ones((), dtype=dtype, device=device).expand(n)


def _cat(parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """One send buffer of `like`'s dtype and device from `parts` (cast on the way in when their
    dtype differs: a `KeySelection`'s `wire_dtype`)."""
    if not parts:
        return like.new_empty(0)
    if all(p.dtype == like.dtype for p in parts):
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    out = like.new_empty(sum(int(p.numel()) for p in parts))
    return torch.cat(parts, out=out)
