"""KeyedJaggedTensor all-to-all: send each rank the features (or id buckets) it owns.

Every rank r passes one KJT per destination rank d (`per_rank[d]`), e.g. the features of the
tables d owns (table-wise) or the ids of every feature that fall in d's row block (row-wise).
Rank d receives from every source s a KJT with the same keys as its own `per_rank[d]` and stitches
them into one KJT, feature-major, with the sources' batches side by side:

    sources:   rank 0 sends d  f0: [a] [b c]     rank 1 sends d  f0: [d e]
                               f1: [ ] [x]                       f1: [y]
    rank d receives        f0: [a] [b c] [d e]      (batch = 2 from rank 0 + 1 from rank 1)
                           f1: [ ] [x]   [y]

Steps (`_kjt_wire`): (1) at the call, one all-to-all of byte chunks, each pair's header (split
sizes, per-key batch sizes and id counts, dtypes, an error flag) followed by as much of its
lengths, ids and weights as the pair's capacity holds; (2) the *header read*: wait for (1), read
every header (the layout), agree on errors and, only when some payload did not fit (every rank
learns that from the headers), launch the rest in a second exchange. With an `ExchangeCapacity`
that has seen batches of this size, (1) carries everything: one exchange per call. `wait()`
finishes (2) and regroups from source-major to feature-major order.

By default the header read runs inside the call (the layout is known when it returns). With
`defer=True` the call only launches (1), so nothing waits for the network until the result is
needed (the pipeline's input dist of batch i+1 under the compute of batch i): the headers are
read (and the rest launched) at the first of `wait()`, `.layout` and the next call with the same
`ExchangeCapacity`; an error flagged in them is agreed on (an all-gather of the messages) and
raised at the first `wait()` or `.layout` only.

Ordering (why a deferred read is safe). gloo and NCCL pair collectives by their position in each
rank's sequence, so every rank must issue the rest exchange and the error messages' all-gather at
the same position. A deferred call issues them at the first of a few points of the caller's
program: its awaitable's `wait()` or `.layout`, or (the rest only) the next call of the same
site. Ranks that run the same program (the rule every collective here already relies on: the
same calls and waits in the same order; the pipeline calls input_dist(i+1), then waits batch
i's inputs in the model's forward order, on every rank alike) reach the first of those points at
the same place in their sequence, so they issue the same collectives in the same order. Every
rank sees the same flags (overflow, error) in the headers, so they decide alike whether to issue
them at all. The read at the next call also keeps the capacities in step: both ends of a pair
update them from the same header, and call k always uses what calls 0..k-1 taught, whether or not
(and in whatever order) the earlier results were waited; it never raises, so an input error
surfaces where its batch is used, not at a later batch's call. Without a capacity, a deferred
call whose result is never waited never reads its headers: as with any collective, every rank
must then drop it alike. With `defer=True` an input error raises (on every rank) at the first
`wait()` or `.layout`, not at the call; later waits re-raise it.

A `KeySelection` input is the same exchange for the common case where every destination gets
some keys of one KJT: the send buffer is built from views of that KJT's per-key segments, so
the ids are copied once on the way out (by the `torch.cat` that builds the buffer) instead of
once per selected KJT and again into the buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from shardrec_collectives import _kjt_wire as wire
from shardrec_collectives import _primitives as prim
from shardrec_collectives._kjt_pack import (
    _DTYPES,
    _ERROR,
    _FIXED,
    _OVERFLOW,
    _VARIABLE,
    _WEIGHT_GRAD,
    _WEIGHTED,
    _cat,
    _dtype_name,
    _keys_hash,
    _ones,
    _Packing,
    _wire_lengths_dtype,
)
from shardrec_collectives._kjt_send import (
    KeySelection,
    Prepared,
    from_kjts,
    from_selection,
)
from shardrec_collectives._kjt_wire import ExchangeCapacity
from shardrec_collectives.awaitable import Awaitable
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.errors import raise_agreed
from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "ExchangeCapacity",
    "KJTAllToAllAwaitable",
    "KJTAllToAllLayout",
    "KeySelection",
    "kjt_all_to_all",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class KJTAllToAllLayout:
    """What moved where in one KJT all-to-all, from this rank's point of view.

    Known once the headers are read (when `kjt_all_to_all` returns, or on first use when
    deferred), so the output distribution of the same batch (e.g. `sequence_all_to_all`) can be
    planned before the received KJT is built.

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
    """The received KJT once waited. `layout` is known once the headers are read: at the call,
    or, deferred (`defer=True`), on first use (which waits for the first exchange)."""

    def __init__(self, exchange: _Exchange) -> None:
        super().__init__()
        self._exchange: _Exchange | None = exchange
        self._layout: KJTAllToAllLayout | None = None

    @property
    def layout(self) -> KJTAllToAllLayout:
        """What moved where (reads the headers first if a deferred call has not yet)."""
        if self._layout is None:
            assert self._exchange is not None
            self._layout = self._exchange.read().layout
        return self._layout

    def _wait_impl(self) -> KeyedJaggedTensor:
        assert self._exchange is not None
        finish = self._exchange.read()
        self._layout = finish.layout
        self._exchange = None  # drop the buffers once the KJT is built
        return finish()


@dataclasses.dataclass(frozen=True)
class _Finish:
    """Waits for the rest of the payloads (if any were too large) and regroups the received
    chunks into the received KJT.

    first: the first exchange's bytes; chunk s holds `capacities[s]` bytes from rank s.
    rest: the second exchange (the payloads' parts beyond their capacity), or None.
    weights: (this rank's sent weights, whether they need a gradient), or None when no rank
    sent weights.
    """

    env: ShardingEnv
    layout: KJTAllToAllLayout
    table: list[list[int]]
    first: torch.Tensor
    capacities: list[int]
    rest: prim.Pending | None
    dtypes: tuple[torch.dtype, torch.dtype]  # the ids' (as sent) and the lengths'
    weights: tuple[torch.Tensor, bool] | None
    stride: int

    def _payloads(self) -> list[torch.Tensor]:
        """Each source's whole payload (a view of the first exchange's chunk when it fit)."""
        rest = self.rest.wait() if self.rest is not None else None
        out: list[torch.Tensor] = []
        at = rest_at = 0
        for row, capacity in zip(self.table, self.capacities, strict=True):
            total = row[wire.PAYLOAD_BYTES]
            chunk = self.first[at : at + min(total, capacity)]
            at += capacity
            if total > capacity:
                assert rest is not None  # every rank saw the overflow flag
                chunk = torch.cat([chunk, rest[rest_at : rest_at + total - capacity]])
                rest_at += total - capacity
            out.append(chunk)
        return out

    def __call__(self) -> KeyedJaggedTensor:
        layout, env, table = self.layout, self.env, self.table
        n_keys = len(layout.keys)
        values_dtype, lengths_dtype = self.dtypes
        wire_lengths = _wire_lengths_dtype(values_dtype, lengths_dtype)
        lengths_parts: list[list[torch.Tensor]] = [[] for _ in range(n_keys)]
        values_parts: list[list[torch.Tensor]] = [[] for _ in range(n_keys)]
        received_w: list[torch.Tensor] = []
        w_dtype = self.weights[0].dtype if self.weights is not None else None
        for s, chunk in enumerate(self._payloads()):
            bags = layout.recv_stride_per_key_per_rank
            ids = layout.recv_values_per_key_per_rank
            n_bags = sum(bags[f][s] for f in range(n_keys))
            n_ids = table[s][6]
            at = wire.header_bytes(n_keys)
            lengths = wire.typed(chunk, at, n_bags, wire_lengths)
            at += wire.align(n_bags * wire_lengths.itemsize)
            values = wire.typed(chunk, at, n_ids, values_dtype)
            at += wire.align(n_ids * values_dtype.itemsize)
            per_key = zip(
                torch.split(lengths, [bags[f][s] for f in range(n_keys)]),
                torch.split(values, [ids[f][s] for f in range(n_keys)]),
                strict=True,
            )
            for f, (lengths_f, values_f) in enumerate(per_key):
                lengths_parts[f].append(lengths_f)
                values_parts[f].append(values_f)
            if w_dtype is not None:
                if table[s][0] & _WEIGHTED:
                    received_w.append(wire.typed(chunk, at, n_ids, w_dtype))
                else:
                    received_w.append(_ones(n_ids, w_dtype, chunk.device))
        device = self.first.device
        lengths_out = _cat_all(lengths_parts, wire_lengths, device)
        if lengths_out.dtype != lengths_dtype:
            lengths_out = lengths_out.to(lengths_dtype)
        values_out = _cat_all(values_parts, values_dtype, device)
        weights: torch.Tensor | None = None
        if self.weights is not None and w_dtype is not None:
            sent, grad = self.weights
            in_splits = list(layout.sent_values_per_rank)
            out_splits = layout.recv_values_per_rank
            weights = prim.link(
                sent,
                _cat(received_w, _ones(0, w_dtype, device)),
                lambda g: prim.all_to_all_sync(env, g, out_splits, in_splits),
                grad,
            )
            per_source = [list(c) for c in zip(*layout.recv_values_per_key_per_rank, strict=True)]
            weights = prim.transpose_segments(weights, per_source)
        length_per_key = [sum(row) for row in layout.recv_values_per_key_per_rank]
        keys = list(layout.keys)
        if layout.variable_batch:
            return KeyedJaggedTensor(
                keys,
                values_out,
                weights=weights,
                lengths=lengths_out,
                stride_per_key_per_rank=[list(r) for r in layout.recv_stride_per_key_per_rank],
                length_per_key=length_per_key,
            )
        return KeyedJaggedTensor(
            keys,
            values_out,
            weights=weights,
            lengths=lengths_out,
            stride=self.stride,
            length_per_key=length_per_key,
        )


def _cat_all(
    parts: list[list[torch.Tensor]], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Key-major concatenation of per-key, per-source pieces (one copy; none for one piece)."""
    flat = [p for per_key in parts for p in per_key]
    if not flat:
        return torch.empty(0, dtype=dtype, device=device)
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def kjt_all_to_all(
    env: ShardingEnv,
    per_rank: Sequence[KeyedJaggedTensor] | KeySelection,
    *,
    error: BaseException | None = None,
    capacity: ExchangeCapacity | None = None,
    defer: bool = False,
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
    one (or fails the local checks: mixed dtypes or devices), every rank raises before the
    result is built (the failing rank its own error, the others `PeerError`).

    `capacity`: the call site's `ExchangeCapacity` (the same object on every call of that site;
    every rank passes one or none). With one, the data travels with the header in one exchange
    once the site has seen a batch of the size; without, the header goes first and the data in
    a second exchange. The result is the same either way.

    `defer`: when True, return right after launching the first exchange; the headers are read
    (the rest of the payloads launched) at the first `wait()`, `.layout` or the next call with
    the same `capacity`, and errors raise at the first `wait()` or `.layout` (module docstring:
    why every rank still issues the same collectives in the same order). The result is the same.

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
    world = env.world_size
    n_own = len(prepared.sends[env.rank].keys)
    sent_caps, recv_caps = (
        capacity.current(world) if capacity is not None else ([0] * world, [0] * world)
    )
    # -- 1. headers and as much data as each pair's capacity holds, in one exchange ----------
    packing = _Packing(prepared)
    caps_out = [
        max(wire.header_bytes(len(o.keys)), c)
        for o, c in zip(prepared.sends, sent_caps, strict=True)
    ]
    caps_in = [max(wire.header_bytes(n_own), c) for c in recv_caps]
    overflow = any(t > c for t, c in zip(packing.totals, caps_out, strict=True))
    if overflow:
        for h in packing.headers:
            h[0] |= _OVERFLOW
    first, rest = packing.pack(caps_out, overflow)
    exchange = _Exchange(
        env=env,
        prepared=prepared,
        packing=packing,
        caps_out=caps_out,
        caps_in=caps_in,
        first=prim.all_to_all(env, first, caps_out, caps_in),
        rest=rest,
        capacity=capacity,
    )
    if defer:
        if capacity is not None:
            capacity.defer(exchange.headers)
    else:
        exchange.read()
    return KJTAllToAllAwaitable(exchange)


class _Exchange:
    """One call's first exchange, launched, and what reads it.

    `headers()` (once) waits for the first exchange, reads every header, updates the capacity
    and, when some pair's payload did not fit and no rank flagged an error (every rank sees the
    flags), launches the rest. `read()` (once; later calls return its result or re-raise its
    error) runs `headers()`, agrees on errors and builds the layout and the regrouping. `read()`
    runs at the call, or, deferred, at the first `wait()` or `layout`; `headers()` then runs at
    the first of those and the next call with the same capacity (module docstring).
    """

    def __init__(
        self,
        *,
        env: ShardingEnv,
        prepared: Prepared,
        packing: _Packing,
        caps_out: list[int],
        caps_in: list[int],
        first: prim.Pending,
        rest: torch.Tensor,
        capacity: ExchangeCapacity | None,
    ) -> None:
        self.env, self.prepared, self.packing = env, prepared, packing
        self.caps_out, self.caps_in = caps_out, caps_in
        self.first, self.rest, self.capacity = first, rest, capacity
        self._headers: tuple[torch.Tensor, list[list[int]], prim.Pending | None] | None = None
        self._finish: _Finish | None = None
        self._failure: BaseException | None = None

    def headers(self) -> tuple[torch.Tensor, list[list[int]], prim.Pending | None]:
        """(the first exchange's bytes, the header table `[S][fields]`, the rest exchange)."""
        if self._headers is not None:
            return self._headers
        if self.capacity is not None:
            self.capacity.forget(self.headers)
        packing, caps_out, caps_in = self.packing, self.caps_out, self.caps_in
        world = self.env.world_size
        head = _FIXED + 2 * len(self.prepared.sends[self.env.rank].keys)
        received = self.first.wait()
        # One host read for every header (the exchange's one host sync on a GPU).
        table = (
            torch.cat(
                [wire.typed(received, a, head, torch.int64) for a in prim.exclusive_cumsum(caps_in)]
            )
            .view(world, head)
            .tolist()
        )
        if self.capacity is not None:
            self.capacity.update(packing.totals, [row[wire.PAYLOAD_BYTES] for row in table])
        # The payloads' rest, only when some pair's did not fit (every rank sees the flags).
        pending_rest: prim.Pending | None = None
        flags = [row[0] for row in table]
        if any(f & _OVERFLOW for f in flags) and not any(f & _ERROR for f in flags):
            in_rest = [max(0, t - c) for t, c in zip(packing.totals, caps_out, strict=True)]
            out_rest = [
                max(0, row[wire.PAYLOAD_BYTES] - c) for row, c in zip(table, caps_in, strict=True)
            ]
            pending_rest = prim.all_to_all(self.env, self.rest, in_rest, out_rest)
        self._headers = (received, table, pending_rest)
        self.first = self.rest = None  # type: ignore[assignment]  # drop the send buffers
        return self._headers

    def read(self) -> _Finish:
        if self._finish is not None:
            return self._finish
        if self._failure is not None:
            raise self._failure
        try:
            self._finish = self._read()
        except BaseException as exc:
            self._failure = exc
            raise
        return self._finish

    def _read(self) -> _Finish:
        env, prepared, packing = self.env, self.prepared, self.packing
        world = env.world_size
        own_keys = prepared.sends[env.rank].keys
        n_own = len(own_keys)
        received, table, pending_rest = self.headers()
        failed = [s for s in range(world) if table[s][0] & _ERROR]
        if failed:
            raise_agreed(env, prepared.error, failed)
        _check_headers(env, table, own_keys)
        any_variable = any(row[0] & _VARIABLE for row in table)
        recv_strides = [[table[s][_FIXED + f] for s in range(world)] for f in range(n_own)]
        recv_counts = [[table[s][_FIXED + n_own + f] for s in range(world)] for f in range(n_own)]
        layout = KJTAllToAllLayout(
            keys=own_keys,
            recv_stride_per_key_per_rank=tuple(tuple(r) for r in recv_strides),
            recv_values_per_key_per_rank=tuple(tuple(r) for r in recv_counts),
            sent_values_per_rank=tuple(h[6] for h in packing.headers),
            sent_stride_per_rank=tuple(h[5] for h in packing.headers),
            variable_batch=any_variable,
        )
        weights: tuple[torch.Tensor, bool] | None = None
        if any(row[0] & _WEIGHTED for row in table):
            w_dtype = prepared.weight_dtype or _DTYPES[next(r[4] for r in table if r[4] >= 0)]
            sent_w = packing.sent_weights
            if sent_w is None:
                sent_w = _ones(sum(layout.sent_values_per_rank), w_dtype, received.device)
            weights = (sent_w, any(row[0] & _WEIGHT_GRAD for row in table))
        stride = sum(table[s][5] for s in range(world))
        return _Finish(
            env,
            layout,
            table,
            received,
            self.caps_in,
            pending_rest,
            (prepared.values.dtype, prepared.lengths_dtype),
            weights,
            stride,
        )


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
