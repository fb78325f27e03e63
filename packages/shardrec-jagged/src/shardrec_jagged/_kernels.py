"""The kernel each value type calls, chosen per operation by measurement.

An operation goes to fbgemm only when it is listed in ``FBGEMM_OPS`` (fbgemm measured faster on
the benchmark shapes: docs/design/jagged-backend.md has the numbers), fbgemm imports, and we are
not inside ``torch.compile`` (the torch-native kernels trace without graph breaks). Everything
else runs the torch-native kernel in ``_torch_kernels``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_jagged import _fbgemm_kernels, _torch_kernels
from shardrec_jagged._backend import fbgemm_available
from shardrec_jagged._torch_kernels import (
    KjtTensors,
    length_per_key_and_min,
    length_per_key_from_offsets,
    offsets_at,
    offsets_to_lengths,
    padded_dense,
    permute_segments,
)

__all__ = [
    "FBGEMM_OPS",
    "batched_lengths_to_offsets",
    "length_per_key",
    "length_per_key_and_min",
    "length_per_key_from_offsets",
    "lengths_to_offsets",
    "offsets_at",
    "offsets_to_lengths",
    "padded_dense",
    "permute_kjt",
    "permute_segments",
]

# Operations where fbgemm-gpu-cpu 1.8.0 measured faster than the torch-native kernel.
FBGEMM_OPS: frozenset[str] = frozenset(
    {"lengths_to_offsets", "batched_lengths_to_offsets", "permute_kjt"}
)


def _fbgemm(op: str) -> bool:
    return op in FBGEMM_OPS and not torch.compiler.is_compiling() and fbgemm_available()


def lengths_to_offsets(lengths: torch.Tensor) -> torch.Tensor:
    """``lengths: (N,)`` -> ``offsets: (N + 1,)`` starting at 0, same dtype."""
    if _fbgemm("lengths_to_offsets"):
        return _fbgemm_kernels.lengths_to_offsets(lengths)
    return _torch_kernels.lengths_to_offsets(lengths)


def batched_lengths_to_offsets(lengths_2d: torch.Tensor) -> torch.Tensor:
    """``(F, B)`` -> ``(F, B + 1)``, each row starting at 0."""
    if _fbgemm("batched_lengths_to_offsets"):
        return _fbgemm_kernels.batched_lengths_to_offsets(lengths_2d)
    return _torch_kernels.batched_lengths_to_offsets(lengths_2d)


def length_per_key(lengths: torch.Tensor, num_keys: int, stride: int) -> list[int]:
    """Ids per key of a fixed-batch ``lengths: (F * B,)`` (one device-to-host copy)."""
    if _fbgemm("length_per_key"):
        return _fbgemm_kernels.length_per_key(lengths, num_keys, stride)
    return _torch_kernels.length_per_key(lengths, num_keys, stride)


def permute_kjt(
    parts: KjtTensors, length_per_key: Sequence[int], order: Sequence[int], stride: int
) -> KjtTensors:
    """A fixed-batch KJT's ``parts`` with its keys reordered to ``order`` (repeats allowed)."""
    values, weights, _ = parts
    # fbgemm splits its copy across intra-op threads; with one thread its bag-by-bag copy is
    # 15-35% slower than torch.cat's 26 contiguous per-key copies (jagged-backend.md).
    flat = values.dim() == 1 and (weights is None or weights.dim() == 1)
    if flat and _fbgemm("permute_kjt") and torch.get_num_threads() > 1:
        return _fbgemm_kernels.permute_kjt(parts, length_per_key, order, stride)
    return _torch_kernels.permute_kjt(parts, length_per_key, order, stride)


def copy_present_(
    dst: Sequence[torch.Tensor | None], src: Sequence[torch.Tensor | None], non_blocking: bool
) -> None:
    """``dst[i].copy_(src[i])`` for each pair where both tensors exist (same shapes)."""
    for mine, theirs in zip(dst, src, strict=True):
        if mine is not None and theirs is not None:
            mine.copy_(theirs, non_blocking=non_blocking)
