"""2 MB pages for large, long-lived tensors: embedding tables and their optimizer state.

A training step gathers and updates rows at random over hundreds of MB; with 4 KB pages nearly
every row costs a TLB miss. `huge_pages(t)` asks Linux for transparent huge pages over the
tensor's memory (`madvise`: `MADV_HUGEPAGE`, then `MADV_COLLAPSE` for pages already written).
Values never change, only the page size. Measured (docs/bench/sharded.md, session 9): a
rank's rowwise-Adagrad update 22.2 -> 18.8 ms, its forward 10.0 -> 9.0 ms; the unsharded fused
step (8 x 100k x 64) about 10% less CPU.

Applied where packed tables are allocated (`batched_lookup.allocate_packed`) and to a fused
lookup's optimizer state. Only contiguous CPU tensors of at least `HUGE_PAGES_MIN_BYTES`
(smaller blocks share their pages with other allocations). `SHARDREC_MALLOC_TUNING=0` in the
environment leaves memory alone; a kernel without THP, or one that refuses, keeps the 4 KB
pages (no error).
"""

from __future__ import annotations

import ctypes
import os
import platform

import torch

__all__ = ["ENV_VAR", "HUGE_PAGES_MIN_BYTES", "huge_pages"]

ENV_VAR = "SHARDREC_MALLOC_TUNING"
"""`0`: leave the process's memory settings alone (here, and glibc's in shardrec_sharding)."""

# madvise advice (linux/mman.h)
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25
_HUGE = 2 << 20
HUGE_PAGES_MIN_BYTES = 32 << 20
"""Smaller tensors are left alone: below glibc's largest mmap threshold (32 MB) a block may
live in the heap, whose pages other allocations share."""


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
