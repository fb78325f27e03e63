"""The send side of the KJT all-to-all (`kjt_all_to_all`): the wire's dtype codes and header
flags, each destination's header, and this rank's payloads packed into the byte chunks of the
exchange (layout: `_kjt_wire`'s docstring)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import torch

from shardrec_collectives import _kjt_wire as wire
from shardrec_collectives import _primitives as prim
from shardrec_collectives._kjt_send import Outgoing, Prepared

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
_ERROR, _WEIGHTED, _VARIABLE, _WEIGHT_GRAD, _OVERFLOW = 1, 2, 4, 8, 16
# header per (source, destination) pair (`_kjt_wire`): flags, keys hash, values / lengths /
# weights dtype codes, source batch size, value count, key count, payload bytes, then per key:
# batch size, value count.
_FIXED = wire.HEADER_FIXED


@functools.lru_cache(maxsize=1024)
def _keys_hash(keys: tuple[str, ...]) -> int:
    digest = hashlib.sha256("\0".join(keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]) if 0 <= code < len(_DTYPES) else "none"


def _wire_lengths_dtype(values: torch.dtype, lengths: torch.dtype) -> torch.dtype:
    """Integer ids: lengths travel as the ids' dtype (the wire's), else as their own."""
    if not values.is_floating_point and not lengths.is_floating_point:
        return values
    return lengths


class _Packing:
    """This rank's payloads (module docstring of `_kjt_wire`): headers, sizes, and the bytes."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        values = prepared.values
        self.values_dtype = values.dtype
        self.lengths_wire = _wire_lengths_dtype(values.dtype, prepared.lengths_dtype)
        self.weight_dtype = prepared.weight_dtype
        weights = [o.weights for o in prepared.sends]
        # This rank's sent weights, one tensor (the source of their gradient), or None.
        self.sent_weights: torch.Tensor | None = None
        if self.weight_dtype is not None:
            like = torch.empty(0, dtype=self.weight_dtype, device=values.device)
            self.sent_weights = _cat(
                [
                    x
                    for o, w in zip(prepared.sends, weights, strict=True)
                    for x in (
                        w if w is not None else [_ones(sum(o.counts), like.dtype, like.device)]
                    )
                ],
                like,
            )
        self.sizes = [self._sizes(o) for o in prepared.sends]
        self.totals = [sum(s) for s in self.sizes]
        self.headers = _headers(prepared, self.totals)

    def _sizes(self, o: Outgoing) -> tuple[int, int, int, int]:
        """Bytes of (header, lengths, values, weights) in the payload to one destination."""
        n = sum(o.counts)
        w = self.weight_dtype.itemsize * n if self.weight_dtype is not None else 0
        return (
            wire.header_bytes(len(o.keys)),
            wire.align(sum(o.strides) * self.lengths_wire.itemsize),
            wire.align(n * self.values_dtype.itemsize),
            wire.align(w),
        )

    def pack(self, capacities: list[int], overflow: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The first exchange's bytes (`capacities[d]` for rank d: the payload's first bytes)
        and, when some payload is larger than its capacity, the rest (else empty)."""
        device = self.prepared.values.device
        # Pinned and non-blocking on a GPU: the headers' read after the exchange is this
        # all-to-all's one host sync.
        headers = prim.host_to_device(
            torch.tensor([x for h in self.headers for x in h], dtype=torch.int64), device
        )
        if not overflow:
            first = torch.empty(sum(capacities), dtype=torch.uint8, device=device)
            for d, at in enumerate(prim.exclusive_cumsum(capacities)):
                self._write(d, first[at : at + self.totals[d]], headers)
            return first, first[:0]
        whole = torch.empty(sum(self.totals), dtype=torch.uint8, device=device)
        starts = prim.exclusive_cumsum(self.totals)
        for d, at in enumerate(starts):
            self._write(d, whole[at : at + self.totals[d]], headers)
        first = torch.zeros(sum(capacities), dtype=torch.uint8, device=device)
        rest: list[torch.Tensor] = []
        for at, cap, total, into in zip(
            starts, capacities, self.totals, prim.exclusive_cumsum(capacities), strict=True
        ):
            first[into : into + min(cap, total)].copy_(whole[at : at + min(cap, total)])
            rest.append(whole[at + min(cap, total) : at + total])
        return first, torch.cat(rest)

    def _write(self, d: int, chunk: torch.Tensor, headers: torch.Tensor) -> None:
        o = self.prepared.sends[d]
        h, lengths, values, _ = self.sizes[d]
        first_header = sum(len(x) for x in self.headers[:d])
        n_header = len(self.headers[d])
        wire.typed(chunk, 0, n_header, torch.int64).copy_(
            headers[first_header : first_header + n_header]
        )
        n_bags, n_ids = sum(o.strides), sum(o.counts)
        wire.write(wire.typed(chunk, h, n_bags, self.lengths_wire), o.lengths)
        wire.write(wire.typed(chunk, h + lengths, n_ids, self.values_dtype), o.values)
        if self.sent_weights is not None:
            first = sum(sum(x.counts) for x in self.prepared.sends[:d])
            wire.typed(chunk, h + lengths + values, n_ids, self.sent_weights.dtype).copy_(
                self.sent_weights[first : first + n_ids].detach()
            )


def _headers(prepared: Prepared, totals: Sequence[int]) -> list[list[int]]:
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
            len(o.keys),
            total,
            *o.strides,
            *o.counts,
        ]
        for o, total in zip(prepared.sends, totals, strict=True)
    ]


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
