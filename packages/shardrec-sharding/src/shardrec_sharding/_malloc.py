"""Keep freed memory for reuse instead of returning it to the OS (glibc), so that a training
loop's steady state takes no page faults.

A sharded training step makes several temporaries of a few MB each (pooled rows, their
gradients, the all-to-all buffers), the same sizes every step. With glibc's defaults, blocks
above the dynamic mmap threshold are fresh mappings and memory at the top of the heap above
the trim threshold goes back to the OS on free, so every step touches fresh pages: about 1,600
to 5,000 minor page faults per step on each rank of `benchmarks/sharded.py` (about 1.8 us
each). `tune()` sets a fixed 32 MB mmap threshold (glibc's largest, so blocks up to 32 MB come
from the heap and are reused), a 1 GB trim threshold and 64 MB top pad: freed blocks stay in
the process and the next step reuses them (0-500 faults per step, measured).

The cost: a process keeps up to about 1 GB of freed heap it could have returned to the OS.
Applied once, at the import of `shardrec_sharding`, only with glibc; `SHARDREC_MALLOC_TUNING=0`
in the environment leaves glibc's settings alone (docs/design/sharding-buffer-reuse.md says why
this rather than buffers kept across steps).

`huge_pages(t)` backs a large, long-lived tensor (a rank's packed fused table) with 2 MB
transparent huge pages (Linux `madvise`: `MADV_HUGEPAGE`, then `MADV_COLLAPSE` for pages already
written): a step gathers and updates rows at random over hundreds of MB, and with 4 KB pages
nearly every row costs a TLB miss. Same switch (`SHARDREC_MALLOC_TUNING=0` leaves memory alone);
a kernel without THP, or one that refuses, leaves the 4 KB pages (no error).
"""

from __future__ import annotations

import ctypes
import os
import platform

import torch

__all__ = ["ENV_VAR", "huge_pages", "tune"]

ENV_VAR = "SHARDREC_MALLOC_TUNING"

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

_SETTINGS = (
    (_M_MMAP_THRESHOLD, 32 << 20),
    (_M_TRIM_THRESHOLD, 1 << 30),
    (_M_TOP_PAD, 64 << 20),
)

_applied: bool | None = None

# madvise advice (linux/mman.h)
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25
_HUGE = 2 << 20
# Only tensors at least this large: below glibc's mmap threshold (32 MB, set above) a block
# lives in the heap, whose mapping other allocations share.
HUGE_PAGES_MIN_BYTES = 32 << 20


def tune() -> bool:
    """Apply the settings above once per process; whether they are in force."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = all(mallopt(param, value) == 1 for param, value in _SETTINGS)
    return _applied


def huge_pages(tensor: torch.Tensor) -> bool:
    """Advise 2 MB pages for the whole 2 MB-aligned part of `tensor`'s memory (CPU, contiguous,
    at least `HUGE_PAGES_MIN_BYTES`), collapsing pages already written; whether the kernel took
    both pieces of advice. Values are untouched (only the page size changes)."""
    if os.environ.get(ENV_VAR, "1").strip() == "0" or platform.system() != "Linux":
        return False
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.device.type != "cpu" or not tensor.is_contiguous() or nbytes < HUGE_PAGES_MIN_BYTES:
        return False
    start = tensor.data_ptr()
    first = (start + _HUGE - 1) & ~(_HUGE - 1)
    length = (start + nbytes - first) & ~(_HUGE - 1)
    if length <= 0:
        return False
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return False
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    took: bool = madvise(first, length, _MADV_HUGEPAGE) == 0
    collapsed: bool = took and madvise(first, length, _MADV_COLLAPSE) == 0
    return collapsed
