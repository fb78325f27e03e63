"""Deterministic 64-bit hashing of int64 tensors in torch (admission draws, sketch cells).

The same finalizer as `_native/idmap.c` (MurmurHash3 fmix64), written with int64 tensor ops:
multiplication wraps modulo 2^64 and the right shifts are made logical by masking.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["mix64", "uniform01"]

_C1 = 0xFF51AFD7ED558CCD - (1 << 64)
_C2 = 0xC4CEB9FE1A85EC53 - (1 << 64)
_MASK31 = (1 << 31) - 1
_MASK53 = (1 << 53) - 1


def _shr33(x: Tensor) -> Tensor:
    return (x >> 33) & _MASK31


def mix64(x: Tensor) -> Tensor:
    """MurmurHash3's 64-bit finalizer of each int64 (a bijection; bits as int64)."""
    x = x ^ _shr33(x)
    x = x * _C1
    x = x ^ _shr33(x)
    x = x * _C2
    return x ^ _shr33(x)


def uniform01(x: Tensor) -> Tensor:
    """A float64 in [0, 1) per int64 of `x`, from the top 53 bits of `mix64(x)`."""
    return ((mix64(x) >> 11) & _MASK53).to(torch.float64) / float(1 << 53)
