"""The store's row I/O in native code (`_native/tierio.c`), when it builds.

`FlatFileStore` reads and writes rows with one positioned call per run of consecutive ids. In
Python each call costs a few microseconds of interpreter work besides the system call (about
8 us a row from the page cache: 16 ms for 2,000 scattered rows of a dim-64 table); the C loop
makes one `pread` / `pwrite` per run with no interpreter in between, and ctypes releases the
GIL during it, so the store's I/O threads and a background prefetch no longer contend with the
training thread for the interpreter. A store file mapped into memory (`native_map`) is read
and written with one `memcpy` per run instead: no system call at all (a `pread` of one row
from the page cache costs ~2.5 us on this VM, a `pwrite` ~5 us; the copy ~0.1 us plus a page
fault on a page's first touch). Built on first use like the lookup kernels
(`shardrec_embedding._native.loader`, `SHARDREC_NATIVE=0` turns it off); without it, or when a
call fails, the store's Python path runs (and reports the error).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from shardrec_embedding._native.loader import native_library_at

__all__ = ["native_map", "native_rows_io", "native_unmap"]

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


@functools.cache
def _library() -> ctypes.CDLL | None:
    lib = native_library_at(Path(__file__).with_name("_native") / "tierio.c")
    if lib is None:
        return None
    lib.sr_tier_io.argtypes = (_I64, _PTR, _I64, _I64, _I64, _PTR, _I64, _PTR, _I64)
    lib.sr_tier_io.restype = _I64
    lib.sr_tier_map.argtypes = (_I64, _I64)
    lib.sr_tier_map.restype = _PTR
    lib.sr_tier_unmap.argtypes = (_PTR, _I64)
    lib.sr_tier_unmap.restype = _I64
    return lib


def native_map(fd: int, nbytes: int) -> int | None:
    """The address of the first `nbytes` of file `fd` mapped shared (read and write, random
    access), or None (no native code, or the kernel refused). Unmap with `native_unmap`."""
    lib = _library()
    if lib is None:
        return None
    address = lib.sr_tier_map(fd, nbytes)
    return int(address) if address else None


def native_unmap(address: int, nbytes: int) -> None:
    """Unmap what `native_map` mapped."""
    lib = _library()
    assert lib is not None, "native_unmap without native_map"
    lib.sr_tier_unmap(address, nbytes)


def native_rows_io(
    fd: int,
    ids: np.ndarray,
    buf: np.ndarray,
    row_bytes: int,
    header: int,
    *,
    write: bool,
    mapped: tuple[int, int] | None = None,
) -> bool:
    """Rows of sorted unique int64 `ids` between the C-contiguous `(len(ids), ...)` `buf` and
    the file `fd` (row `i` at byte `header + i * row_bytes`); `mapped`: `(address, rows)` of
    the file mapped by `native_map` (copies, no system call; an id past `rows` fails). True
    when done; False when the native code is unavailable or a call failed (nothing reported:
    the caller's path repeats the I/O, positioned and idempotent, and reports)."""
    lib = _library()
    if lib is None or ids.size == 0:
        return lib is not None
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    assert buf.flags.c_contiguous and buf.nbytes == ids.size * row_bytes
    base, rows = mapped if mapped is not None else (0, 0)
    done = lib.sr_tier_io(
        fd, ids.ctypes.data, ids.size, row_bytes, header, buf.ctypes.data, int(write), base, rows
    )
    return int(done) == 0
