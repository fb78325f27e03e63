"""Moving a KeyedJaggedTensor between devices and memories: to, pin_memory, copy_, record_stream.

Functions of a KJT rather than methods so the value type's own module stays small; the methods of
`KeyedJaggedTensor` delegate here. Host metadata (keys, strides, per-key lengths) travels as is:
moving tensors never needs a device-to-host sync.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from shardrec_jagged import _kernels

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["empty_like_or_none", "kjt_copy_", "kjt_pin_memory", "kjt_record_stream", "kjt_to"]


def kjt_to(
    kjt: KeyedJaggedTensor,
    device: torch.device | str,
    non_blocking: bool = False,
    dtype: torch.dtype | None = None,
) -> KeyedJaggedTensor:
    """A copy on ``device``; ``dtype`` (if given) converts the weights only, as TorchRec."""
    w = kjt._weights
    if w is not None:
        w = w.to(device=device, dtype=dtype, non_blocking=non_blocking)
    inv = kjt._inverse_indices
    return type(kjt)._unchecked(
        keys=kjt._keys,
        values=kjt._values.to(device, non_blocking=non_blocking),
        weights=w,
        lengths=_to(kjt._lengths, device, non_blocking),
        offsets=_to(kjt._offsets, device, non_blocking),
        stride=kjt._stride,
        stride_per_key_per_rank=kjt._stride_per_key_per_rank,
        length_per_key=kjt._length_per_key,
        offset_per_key=kjt._offset_per_key,
        inverse_indices=None
        if inv is None
        else (inv[0], inv[1].to(device, non_blocking=non_blocking)),
    )


def kjt_pin_memory(kjt: KeyedJaggedTensor) -> KeyedJaggedTensor:
    """A copy in pinned host memory (for asynchronous host-to-device copies)."""
    w, inv = kjt._weights, kjt._inverse_indices
    return type(kjt)._unchecked(
        keys=kjt._keys,
        values=kjt._values.pin_memory(),
        weights=None if w is None else w.pin_memory(),
        lengths=None if kjt._lengths is None else kjt._lengths.pin_memory(),
        offsets=None if kjt._offsets is None else kjt._offsets.pin_memory(),
        stride=kjt._stride,
        stride_per_key_per_rank=kjt._stride_per_key_per_rank,
        length_per_key=kjt._length_per_key,
        offset_per_key=kjt._offset_per_key,
        inverse_indices=None if inv is None else (inv[0], inv[1].pin_memory()),
    )


def kjt_copy_(
    dst: KeyedJaggedTensor, src: KeyedJaggedTensor, non_blocking: bool = False
) -> KeyedJaggedTensor:
    """Copy ``src``'s tensors into ``dst``'s (same shapes); ``dst`` adopts its host metadata."""
    _kernels.copy_present_(
        (dst._values, dst._weights, dst._lengths, dst._offsets),
        (src._values, src._weights, src._lengths, src._offsets),
        non_blocking,
    )
    if dst._inverse_indices is not None and src._inverse_indices is not None:
        dst._inverse_indices[1].copy_(src._inverse_indices[1], non_blocking=non_blocking)
    dst._stride = src._stride
    dst._stride_per_key_per_rank = src._stride_per_key_per_rank
    dst._stride_per_key = src._stride_per_key
    dst._length_per_key = src._length_per_key
    dst._offset_per_key = src._offset_per_key
    dst._lengths_offset_per_key = src._lengths_offset_per_key
    dst._jt_dict = None
    return dst


def kjt_record_stream(kjt: KeyedJaggedTensor, stream: torch.Stream) -> None:
    """Mark every tensor of ``kjt`` as in use by ``stream`` (for the caching allocator)."""
    for t in (kjt._values, kjt._weights, kjt._lengths, kjt._offsets):
        if t is not None:
            t.record_stream(stream)


def _to(
    t: torch.Tensor | None, device: torch.device | str, non_blocking: bool
) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)


def empty_like_or_none(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else torch.empty_like(t, device=device)
