"""Torch-native jagged kernels: vectorized, no loop over bags or ids (a loop over keys is fine).

These are the reference implementation every backend must match, and the path used when fbgemm
is missing or measures slower (see ``_kernels.py``).
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import numpy as np
import torch

_WIDE_INTS = (torch.int32, torch.int64)

# A KJT's (values, weights, lengths): ``(N, ...)``, ``(N,)`` or None, ``(F * B,)``. The permute
# kernels take and return the three together.
KjtTensors = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]


def index_tensor(
    indices: Sequence[int], device: torch.device, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """Host ints -> a 1-D ``dtype`` (int64 or int32) tensor on ``device``.

    On CPU, ``torch.frombuffer`` over an ``array.array`` (1.1 us for 26 ints) instead of
    ``torch.tensor(list)`` (3.3-4.8 us: per-element type inference); the tensor keeps the
    array alive. ``torch.tensor`` elsewhere, for empty input, and under ``torch.compile``.
    """
    if len(indices) > 0 and device.type == "cpu" and not torch.compiler.is_compiling():
        typecode = "q" if dtype == torch.int64 else "i"
        buffer = array.array(typecode, indices)
        if buffer.itemsize == dtype.itemsize:
            return torch.frombuffer(buffer, dtype=dtype)
    return torch.tensor(list(indices), dtype=dtype, device=device)


def to_host_list(tensor: torch.Tensor) -> list[int]:
    """``tensor.tolist()`` for a 1-D integer tensor on any device (TorchRec's ``_safe_tolist``:
    on CUDA, one copy to the host on the current stream instead of a device-wide sync)."""
    if tensor.device.type == "cpu":
        out: list[int] = tensor.tolist()
        return out
    host = tensor.to("cpu", non_blocking=True)
    if tensor.device.type == "cuda":
        torch.cuda.current_stream(tensor.device).synchronize()
    out = host.tolist()
    return out


def lengths_to_offsets(lengths: torch.Tensor) -> torch.Tensor:
    """``lengths: (N,)`` -> ``offsets: (N + 1,)`` starting at 0, same dtype as ``lengths``."""
    return torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=lengths.dtype), (1, 0))


def batched_lengths_to_offsets(lengths_2d: torch.Tensor) -> torch.Tensor:
    """``lengths_2d: (F, B)`` -> per-row offsets ``(F, B + 1)``, each row starting at 0."""
    return torch.nn.functional.pad(torch.cumsum(lengths_2d, 1, dtype=lengths_2d.dtype), (1, 0))


def offsets_to_lengths(offsets: torch.Tensor) -> torch.Tensor:
    """``offsets: (N + 1,)`` -> ``lengths: (N,)``; empty offsets give empty lengths."""
    if offsets.numel() == 0:
        return offsets
    return offsets[1:] - offsets[:-1]


def permute_segments(
    tensor: torch.Tensor, segment_sizes: Sequence[int], order: Sequence[int]
) -> torch.Tensor:
    """Reorder the consecutive segments of ``tensor`` (sizes ``segment_sizes``) into ``order``.

    ``order`` may repeat or drop segments. One ``split`` into views plus one ``cat`` copy.
    """
    if len(order) == 0:
        return tensor[:0]
    parts = tensor.split_with_sizes(list(segment_sizes))
    return torch.cat([parts[i] for i in order])


def length_per_key(lengths: torch.Tensor, num_keys: int, stride: int) -> list[int]:
    """Ids per key of a fixed-batch ``lengths: (F * B,)``. One device-to-host copy.

    Sums in ``lengths``' own dtype when it is int32/int64 (int32 sums take half the time of
    the default int64 promotion on CPU). That cannot overflow where the KJT is usable: int32
    lengths give int32 offsets, which already require the total to fit in int32.
    """
    dtype = lengths.dtype if lengths.dtype in _WIDE_INTS else torch.int64
    out: list[int] = lengths.view(num_keys, stride).sum(1, dtype=dtype).tolist()
    return out


def length_per_key_and_min(
    lengths: torch.Tensor, num_keys: int, stride: int
) -> tuple[list[int], int]:
    """``length_per_key`` of a fixed-batch ``lengths: (F * B,)``, B > 0, and its smallest
    length (a negative length would otherwise hide inside a key's sum).

    A plain CPU int32/int64 tensor is read through a numpy view of its memory (no copy): numpy
    runs the sum and the min with less per-call overhead than torch (4.2 against 5.4 us for
    13k int32 lengths, measured; docs/bench/jagged.md), in the lengths' own dtype as below.
    Elsewhere torch sums (int32/int64 in their own dtype: int32 lengths give int32 offsets, so
    their total must fit int32 anyway; narrower ones promoted to int64) and, off the CPU, one
    device-to-host copy carries both results.
    """
    dtype = lengths.dtype
    if lengths.is_cpu and dtype in _WIDE_INTS and type(lengths) is torch.Tensor:
        # type() is exact: subclasses (FakeTensor, ...) have no numpy view.
        # The ufuncs' reduce directly: ndarray.min() adds a Python-level wrapper call.
        flat = lengths.numpy()
        per_key = np.add.reduce(flat.reshape(num_keys, stride), 1, dtype=flat.dtype)
        sums: list[int] = per_key.tolist()
        return sums, int(np.minimum.reduce(flat))
    if dtype not in _WIDE_INTS:
        dtype = torch.int64
    on_device = lengths.view(num_keys, stride).sum(1, dtype=dtype)
    smallest = lengths.min()
    if lengths.is_cpu:
        out: list[int] = on_device.tolist()
        return out, int(smallest)
    both: list[int] = torch.cat([on_device, smallest.view(1).to(dtype)]).tolist()
    return both[:-1], both[-1]


def offsets_at(offsets: torch.Tensor, stride: int) -> list[int]:
    """Every ``stride``-th offset: each key's first bag, then the end (F + 1 host ints, one
    strided read)."""
    out: list[int] = offsets[:: max(stride, 1)].tolist()
    return out


def length_per_key_from_offsets(offsets: torch.Tensor, num_keys: int, stride: int) -> list[int]:
    """Ids per key of a fixed-batch KJT from its ``offsets: (F * B + 1,)``: one strided read
    of F + 1 entries (one device-to-host copy), the differences taken on the host."""
    if stride == 0:
        return [0] * num_keys
    bounds: list[int] = offsets[::stride].tolist()
    return [bounds[i + 1] - bounds[i] for i in range(num_keys)]


def permute_kjt(
    parts: KjtTensors, length_per_key: Sequence[int], order: Sequence[int], stride: int
) -> KjtTensors:
    """A fixed-batch KJT's ``parts`` with its keys reordered to ``order`` (repeats allowed)."""
    values, weights, lengths = parts
    new_values = permute_segments(values, length_per_key, order)
    new_weights = None if weights is None else permute_segments(weights, length_per_key, order)
    if stride == 0 or len(order) == 0:
        return new_values, new_weights, lengths[:0]
    index = index_tensor(order, lengths.device)
    new_lengths = lengths.reshape(-1, stride).index_select(0, index).view(-1)
    return new_values, new_weights, new_lengths


def padded_dense(
    values: torch.Tensor,
    offsets: torch.Tensor,
    lengths: torch.Tensor,
    max_length: int,
    padding_value: float,
) -> torch.Tensor:
    """Jagged ``values`` (N, *D) -> dense ``(B, max_length, *D)``; longer bags are truncated."""
    b = lengths.numel()
    tail = tuple(values.shape[1:])
    if b == 0 or max_length == 0 or values.size(0) == 0:
        return values.new_full((b, max_length, *tail), padding_value)
    pos = torch.arange(max_length, device=values.device)
    mask = pos.unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)
    idx = (offsets[:-1].unsqueeze(1) + pos.unsqueeze(0)).clamp_(max=values.size(0) - 1)
    gathered = values[idx]
    mask = mask.view(b, max_length, *([1] * len(tail)))
    return torch.where(mask, gathered, torch.full_like(gathered, padding_value))
