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

`huge_pages(t)` (from `shardrec_embedding.memory`, where packed tables are allocated) backs a
large, long-lived tensor with 2 MB transparent huge pages; the same switch turns it off.
"""

from __future__ import annotations

import ctypes
import os
import platform

from shardrec_embedding.memory import ENV_VAR, huge_pages

__all__ = ["ENV_VAR", "huge_pages", "tune"]


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
