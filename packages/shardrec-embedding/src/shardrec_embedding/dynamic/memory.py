"""Randomly addressed host arrays of the raw-id tables on 2 MiB (huge) pages.

A training step of a dynamic table in the stream regime probes its id map at random for every
id and every new id (a find, an erasure and an insertion per new id: `id_map.py`), about
100,000 random touches per table per step into a map of several MiB. On 4 KiB pages each
of them is also a TLB miss; Linux backs memory with 2 MiB pages where asked
(`madvise(MADV_HUGEPAGE)`, the default "madvise" mode of transparent huge pages), which
takes the TLB misses out of the map's probes.

`huge_empty` allocates a tensor whose data starts on a 2 MiB boundary and asks for huge pages
before anything touches it (a page that is already mapped would stay small). The pages below
the aligned start are never touched, so they cost address space, not memory. Elsewhere than
Linux, or below 2 MiB, it is a plain `torch.empty`.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["HUGE_PAGE", "huge_empty"]

HUGE_PAGE = 2 << 20
"""Bytes of a (transparent) huge page on x86-64 and arm64 Linux."""

_MADV_HUGEPAGE = 14


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's `madvise(addr, length, advice)`, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    madvise: Callable[[int, int, int], int] = fn
    return madvise


def huge_empty(numel: int, dtype: torch.dtype) -> Tensor:
    """An uninitialized `(numel,)` CPU tensor on huge pages where the OS grants them (module
    doc); the caller fills it. Its storage may be larger than `numel` elements."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = numel * itemsize
    madvise = _madvise()
    if madvise is None or nbytes < HUGE_PAGE:
        return torch.empty(numel, dtype=dtype)
    raw = torch.empty(numel + HUGE_PAGE // itemsize, dtype=dtype)
    skip = (-raw.data_ptr()) % HUGE_PAGE
    out = raw[skip // itemsize : skip // itemsize + numel]
    length = nbytes - nbytes % HUGE_PAGE
    # Advice only: a refusal (an old kernel, THP off) leaves ordinary pages, same contents.
    madvise(out.data_ptr(), length, _MADV_HUGEPAGE)
    return out
