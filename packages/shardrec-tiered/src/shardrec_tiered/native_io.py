"""The store's row I/O in native code (`_native/tierio.c`), when it builds.

`FlatFileStore` reads and writes rows with one positioned call per run of consecutive ids. In
Python each call costs a few microseconds of interpreter work besides the system call (about
8 us a row from the page cache: 16 ms for 2,000 scattered rows of a dim-64 table); the C loop
makes one `pread` / `pwrite` per run with no interpreter in between, and ctypes releases the
GIL during it, so the store's I/O threads and a background prefetch no longer contend with the
training thread for the interpreter. Built on first use like the lookup kernels
(`shardrec_embedding._native.loader`, `SHARDREC_NATIVE=0` turns it off); without it, or when a
call fails, the store's Python path runs (and reports the error).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from shardrec_embedding._native.loader import native_library_at

__all__ = ["native_rows_io"]

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


@functools.cache
def _function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]  # ctypes' private type
    lib = native_library_at(Path(__file__).with_name("_native") / "tierio.c")
    if lib is None:
        return None
    fn = lib.sr_tier_io
    fn.argtypes = (_I64, _PTR, _I64, _I64, _I64, _PTR, _I64)
    fn.restype = _I64
    return fn


def native_rows_io(
    fd: int, ids: np.ndarray, buf: np.ndarray, row_bytes: int, header: int, *, write: bool
) -> bool:
    """Rows of sorted unique int64 `ids` between the C-contiguous `(len(ids), ...)` `buf` and
    the file `fd` (row `i` at byte `header + i * row_bytes`). True when done; False when the
    native code is unavailable or a call failed (nothing reported: the caller's path repeats
    the I/O, positioned and idempotent, and reports)."""
    fn = _function()
    if fn is None or ids.size == 0:
        return fn is not None
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    assert buf.flags.c_contiguous and buf.nbytes == ids.size * row_bytes
    return (
        int(fn(fd, ids.ctypes.data, ids.size, row_bytes, header, buf.ctypes.data, int(write))) == 0
    )
