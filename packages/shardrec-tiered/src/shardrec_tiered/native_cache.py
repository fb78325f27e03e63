"""A dense-id `RowCache`'s admission in native code (`_native/tiercache.c`), when it builds.

The cache's torch path runs some thirty small tensor operations per table and batch (find,
victim choice, write-back packing, eviction, install, scores), about 0.3-0.9 ms a table of
interpreter and dispatch work whatever the batch: with 26 tables that is more than the
in-memory step. Here the same bookkeeping runs in three C calls over the cache's own tensors
(plan: slots and victims; pack: the dirty victims' rows for the write-back; install: the read
rows into the victims' slots, scores); the store's I/O stays in Python between them, so its
errors are reported as before and a failed write-back or read leaves the cache unchanged.
A lookup whose tables all qualify and whose stores are mapped admits a batch for all its
tables in one call instead (`sr_cache_admit_tables`, table_batch.py). Built on first use like
the store's I/O (`SHARDREC_NATIVE=0` turns it off).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from shardrec_embedding._native.loader import native_library_at

__all__ = ["native_cache"]

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


@functools.cache
def native_cache() -> ctypes.CDLL | None:
    """The C functions (`sr_cache_plan`, `sr_cache_pack`, `sr_cache_install`, and the
    all-tables `sr_cache_admit_tables`, `sr_cache_pin_tables`, `sr_cache_dirty_tables`), or
    None."""
    lib = native_library_at(Path(__file__).with_name("_native") / "tiercache.c")
    if lib is None:
        return None
    lib.sr_cache_plan.argtypes = (_PTR, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _PTR)
    lib.sr_cache_plan.restype = _I64
    lib.sr_cache_pack.argtypes = (_PTR, _I64, _PTR, _PTR, _PTR, _PTR, _PTR, _I64, _I64, _PTR, _PTR)
    lib.sr_cache_pack.restype = _I64
    lib.sr_cache_install.argtypes = (
        *(_PTR, _I64, _PTR, _PTR, _I64, _PTR, _I64, _PTR, _PTR, _I64),
        *(_PTR, _PTR, _PTR, _PTR, _PTR, _I64, _I64, _PTR, _PTR),
    )
    lib.sr_cache_install.restype = None
    lib.sr_cache_admit_tables.argtypes = (
        *(_PTR, _I64, _PTR, _PTR, _I64, _I64, _PTR, _I64, _I64, _I64),
        *(_PTR, _PTR, _PTR, _PTR, _PTR),
    )
    lib.sr_cache_admit_tables.restype = _I64
    lib.sr_cache_pin_tables.argtypes = (_PTR, _PTR, _PTR, _I64, _I64, _I64)
    lib.sr_cache_pin_tables.restype = None
    lib.sr_cache_dirty_tables.argtypes = (_PTR, _PTR, _PTR, _I64, _I64)
    lib.sr_cache_dirty_tables.restype = None
    return lib
