"""KeyedJaggedTensor operations beside the class: ``concat``, ``from_jt_dict``, ``split``.

The class is passed in (``cls``, or read off an input KJT), never imported at runtime: the class
module imports this one (docs/design/jagged-module-split.md). The class module wraps
``concat``/``from_jt_dict`` with ``torch.fx.wrap``, so a traced module records one leaf call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.fx

from shardrec_jagged import _kernels
from shardrec_jagged._kjt_device import empty_like_or_none
from shardrec_jagged._kjt_layout import used_part
from shardrec_jagged._validation import check_segments, validate_offsets
from shardrec_jagged.jagged_tensor import JaggedTensor

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["from_jt_dict", "kjt_concat", "kjt_split"]


def kjt_concat(kjt_list: Sequence[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    if len(kjt_list) == 0:
        raise ValueError("concat needs at least one KeyedJaggedTensor, got an empty list")
    first = kjt_list[0]
    weighted = first._weights is not None
    variable = first.variable_stride_per_key()
    stride: int | None = None
    keys = [k for kjt in kjt_list for k in kjt._keys]
    # Fast path: all keys distinct (one set, ~0.3 us); otherwise the loop below finds which
    # input holds a duplicate (a key repeated inside one input, from permute, is allowed).
    keys_distinct = len(set(keys)) == len(keys)
    owner: dict[str, int] = {}
    for i, kjt in enumerate(kjt_list):
        if (kjt._weights is not None) != weighted:
            raise ValueError(
                f"cannot concat weighted with unweighted KeyedJaggedTensors: kjt_list[0] is "
                f"{'weighted' if weighted else 'unweighted'}, kjt_list[{i}] is not"
            )
        if kjt.variable_stride_per_key() != variable:
            raise ValueError(
                f"cannot concat variable-batch with fixed-batch KeyedJaggedTensors "
                f"(kjt_list[{i}] differs from kjt_list[0])"
            )
        if not variable and kjt._keys:
            if stride is None:
                stride = kjt._stride
            elif kjt._stride != stride:
                raise ValueError(
                    f"cannot concat KeyedJaggedTensors of different batch sizes: {stride} and "
                    f"{kjt._stride} (kjt_list[{i}], keys {kjt._keys})"
                )
        if keys_distinct:
            continue
        for k in dict.fromkeys(kjt._keys):  # a key repeated inside one input (permute): kept
            if k in owner:
                raise ValueError(
                    f"duplicate key {k!r} in concat: kjt_list[{owner[k]}] and kjt_list[{i}] "
                    "both hold it; keys of the concatenated KJTs must be disjoint"
                )
            owner[k] = i
    have_lpk = all(k._length_per_key is not None for k in kjt_list)
    lpk = [n for k in kjt_list for n in (k._length_per_key or [])] if have_lpk else None
    spkpr = [r for k in kjt_list for r in k.stride_per_key_per_rank()] if variable else None
    if spkpr and any(len(r) != len(spkpr[0]) for r in spkpr):
        raise ValueError("cannot concat variable-batch KeyedJaggedTensors of different rank counts")
    invs = [k._inverse_indices for k in kjt_list]
    inverse: tuple[list[str], torch.Tensor] | None = None
    if all(v is not None for v in invs):
        inverse = (
            [key for v in invs if v is not None for key in v[0]],
            torch.cat([v[1] for v in invs if v is not None]),
        )
    elif any(v is not None for v in invs):
        raise ValueError("cannot concat KeyedJaggedTensors where only some have inverse_indices")
    if variable:
        stride = max(k._stride for k in kjt_list)
    last = len(kjt_list) - 1
    return type(first)._unchecked(
        keys=keys,
        values=torch.cat([_used(k, k._values, i == last) for i, k in enumerate(kjt_list)]),
        weights=torch.cat([_used(k, k.weights(), i == last) for i, k in enumerate(kjt_list)])
        if weighted
        else None,
        lengths=torch.cat([k.lengths() for k in kjt_list]),
        offsets=None,
        stride=first._stride if stride is None else stride,
        stride_per_key_per_rank=spkpr,
        length_per_key=lpk,
        inverse_indices=inverse,
    )


def _used(kjt: KeyedJaggedTensor, data: torch.Tensor, is_last: bool) -> torch.Tensor:
    """``data`` without the unused tail of a longer values buffer (a tail of the last input is
    harmless; any other would shift the following inputs' values)."""
    if is_last:
        return data
    total = kjt.offset_per_key()[-1]  # cached on synced inputs
    return data if data.size(0) == total else data[:total]


def from_jt_dict(
    cls: type[KeyedJaggedTensor], jt_dict: Mapping[str, JaggedTensor]
) -> KeyedJaggedTensor:
    keys = list(jt_dict.keys())
    jts = list(jt_dict.values())
    if not jts:
        return cls.empty().sync()
    weighted = [jt.weights_or_none() is not None for jt in jts]
    if any(weighted) and not all(weighted):
        bad = keys[weighted.index(not weighted[0])]
        raise ValueError(
            f"from_jt_dict got weighted and unweighted JaggedTensors (key {bad!r} differs "
            f"from {keys[0]!r}); all must be weighted or none"
        )
    strides = [jt.lengths().numel() for jt in jts]
    same = all(s == strides[0] for s in strides)
    return cls(
        keys=keys,
        values=torch.cat([jt.values() for jt in jts]),
        weights=torch.cat([jt.weights() for jt in jts]) if weighted[0] else None,
        lengths=torch.cat([jt.lengths() for jt in jts]),
        stride=strides[0] if same else None,
        stride_per_key_per_rank=None if same else [[s] for s in strides],
    ).sync()


def kjt_split(kjt: KeyedJaggedTensor, segments: Sequence[int]) -> list[KeyedJaggedTensor]:
    """Consecutive groups of ``segments[i]`` keys each (0 allowed; they must sum to F)."""
    segs = check_segments(segments, len(kjt._keys))
    out: list[KeyedJaggedTensor] = []
    opk = kjt.offset_per_key()
    lpk = kjt.length_per_key()
    lopk = kjt.lengths_offset_per_key()
    spkpr = kjt._stride_per_key_per_rank
    w = kjt._weights
    lengths = kjt.lengths()
    start = 0
    for seg in segs:
        end = start + seg
        if seg == len(kjt._keys):
            out.append(kjt)
        else:
            v0, v1 = opk[start], opk[end]
            out.append(
                type(kjt)._unchecked(
                    keys=kjt._keys[start:end],
                    values=kjt._values[v0:v1],
                    weights=None if w is None else w[v0:v1],
                    lengths=lengths[lopk[start] : lopk[end]],
                    offsets=None,
                    stride=kjt._stride,
                    stride_per_key_per_rank=None if spkpr is None else spkpr[start:end],
                    length_per_key=lpk[start:end],
                )
            )
        start = end
    return out


def kjt_empty_like(kjt: KeyedJaggedTensor, device: torch.device | None) -> KeyedJaggedTensor:
    """Without ``device``: no keys, same dtypes, stride and variable-batch layout (TorchRec's).

    With ``device``: same keys and shapes, uninitialized tensors on ``device``.
    """
    if device is None:
        dev = kjt.device()
        w = kjt.weights_or_none()
        spkpr = kjt._stride_per_key_per_rank
        return type(kjt)._unchecked(
            keys=[],
            values=torch.empty(0, dtype=kjt._values.dtype, device=dev),
            weights=None if w is None else torch.empty(0, dtype=w.dtype, device=dev),
            lengths=torch.empty(0, dtype=kjt.lengths().dtype, device=dev),
            offsets=None,
            stride=kjt.stride(),
            stride_per_key_per_rank=spkpr,  # kept, as TorchRec keeps it
        )
    inv = kjt._inverse_indices
    return type(kjt)._unchecked(
        keys=kjt._keys,
        values=torch.empty_like(kjt._values, device=device),
        weights=empty_like_or_none(kjt._weights, device),
        lengths=empty_like_or_none(kjt._lengths, device),
        offsets=empty_like_or_none(kjt._offsets, device),
        stride=kjt._stride,
        stride_per_key_per_rank=kjt._stride_per_key_per_rank,
        length_per_key=kjt._length_per_key,
        offset_per_key=kjt._offset_per_key,
        inverse_indices=None if inv is None else (inv[0], torch.empty_like(inv[1], device=device)),
    )


def _symbolic(t: torch.Tensor) -> bool:
    """True where contents cannot be read: meta tensors, tracing, torch.compile."""
    return (
        not isinstance(t, torch.Tensor)
        or t.is_meta
        or torch.compiler.is_compiling()
        or bool(torch.fx._symbolic_trace.is_fx_symbolic_tracing())
    )


def check_offsets_alone(kjt: KeyedJaggedTensor) -> None:
    """For a KJT built from offsets alone, before its lengths are derived: its first read
    checked each key's bounds only, and a decrease inside a key would come out as a negative
    length in the key's JaggedTensor. One pass over the offsets (the JaggedTensors handed out
    read them all anyway); the error names the offset."""
    given = kjt._offsets
    if kjt._lengths is None and given is not None and not _symbolic(given):
        validate_offsets(given, kjt._values.size(0))


def kjt_to_dict(kjt: KeyedJaggedTensor, compute_offsets: bool) -> dict[str, JaggedTensor]:
    """Key -> JaggedTensor, views into ``kjt`` (the caller caches it)."""
    keys = kjt._keys
    n_keys = len(keys)
    if n_keys == 0:
        return {}
    lpk = kjt.length_per_key()
    check_offsets_alone(kjt)
    values = used_part(kjt._values, lpk).split_with_sizes(lpk)
    w = kjt._weights
    weights: Sequence[torch.Tensor | None] = (
        [None] * n_keys if w is None else used_part(w, lpk).split_with_sizes(lpk)
    )
    lengths = kjt.lengths()
    offsets: Sequence[torch.Tensor | None]
    if kjt._stride_per_key_per_rank is None:
        lengths_2d = lengths.reshape(n_keys, kjt._stride)
        per_key_lengths: Sequence[torch.Tensor] = lengths_2d.unbind(0)
        if not compute_offsets:
            offsets = [None] * n_keys
        elif kjt._stride == 0:
            offsets = per_key_lengths  # no bags: empty offsets, as TorchRec
        else:
            offsets = _kernels.batched_lengths_to_offsets(lengths_2d).unbind(0)
    else:
        per_key_lengths = lengths.split_with_sizes(kjt.stride_per_key())
        offsets = (
            [_kernels.lengths_to_offsets(x) for x in per_key_lengths]
            if compute_offsets
            else [None] * n_keys
        )
    return {
        k: JaggedTensor._unchecked(values[i], weights[i], per_key_lengths[i], offsets[i])
        for i, k in enumerate(keys)
    }


def kjt_clear_storage(kjt: KeyedJaggedTensor) -> None:
    """Shrink the storage of every tensor of `kjt` (its inverse indices too) to 0 bytes."""
    inverse = kjt._inverse_indices
    for t in (kjt._values, kjt._weights, kjt._lengths, kjt._offsets):
        if t is not None:
            t.untyped_storage().resize_(0)
    if inverse is not None:
        inverse[1].untyped_storage().resize_(0)
