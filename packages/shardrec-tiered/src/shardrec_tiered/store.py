"""`FlatFileStore`: one dense-id table's rows and optimizer state in a flat file on disk.

Row `i` sits at `HEADER_BYTES + i * row_bytes` (layout.py). A store whose file fits the
process's map budget (`MAP_BUDGET_FRACTION` of the machine's memory, over all its mapped
stores) is mapped shared into memory and its rows are copied in and out in native code with no
system call (`native_io.py`): the per-row `pread` / `pwrite` of a row from the page cache costs
more than the rest of a tiered step (docs/tiered.md, "Speed"). Larger stores (tables beyond
RAM, whose rows mostly wait for the disk anyway) are read and written positioned (`os.preadv` /
`os.pwritev`, which release the GIL) from a small thread pool: the ids of a call are sorted,
runs of consecutive ids become one call each, and the runs are split across the threads, so
several reads are in flight at once (the disk's queue depth); writes, which land in the page
cache, run on one thread; each thread's calls run in native code when it builds. Those rows
never pass through a memory map, so the process's resident memory holds only the cache,
whatever the table's size; a mapped store's touched pages count in the resident set (as file
pages the kernel may reclaim), at most its file's size.

A mapped store is written only where `posix_fallocate` reserved its blocks, so a write-back
never needs space (a full disk surfaces at `flush`, as fdatasync's error); a disk that fails
to read a page of a mapped store no longer in the page cache raises SIGBUS instead of
StoreIOError.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shardrec_tiered.layout import (
    HEADER_BYTES,
    StoreLayout,
    StoreLayoutError,
    decode_header,
    encode_header,
)
from shardrec_tiered.native_io import native_map, native_rows_io, native_unmap

_native_rows_io = native_rows_io

__all__ = ["MAP_BUDGET_FRACTION", "FlatFileStore", "StoreIOError", "StoreSpaceError", "store_file"]

_MIN_RUNS_PER_THREAD = 64

MAP_BUDGET_FRACTION = 0.25
"""Stores are mapped while all of a process's mapped store files total at most this share of
the machine's physical memory (`mapped=None`)."""

_mapped_lock = threading.Lock()
_mapped_bytes = 0


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def _reserve_map(nbytes: int, force: bool) -> bool:
    """Count `nbytes` against the process's map budget if they fit (or `force`)."""
    global _mapped_bytes
    with _mapped_lock:
        if not force and _mapped_bytes + nbytes > MAP_BUDGET_FRACTION * _physical_memory():
            return False
        _mapped_bytes += nbytes
        return True


def _release_map(nbytes: int) -> None:
    global _mapped_bytes
    with _mapped_lock:
        _mapped_bytes -= nbytes


class StoreSpaceError(OSError):
    """A store directory that cannot hold the table: not writable, or too little free space."""


class StoreIOError(OSError):
    """A read or write-back of a table's store failed (the disk is full, or failing): names
    the table, the store file, the rows and bytes, and keeps the OS error's errno."""

    def __init__(
        self,
        table: str,
        path: str,
        rows: int,
        nbytes: int,
        offset: int,
        cause: OSError,
        *,
        write: bool,
    ) -> None:
        what = "write back" if write else "read"
        hint = ""
        if cause.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = (
                "; the disk holding the store is full: free space there or move the store "
                "(KeyValueParams.ssd_storage_directory). The rows stay in the cache, unsaved; "
                "checkpoints already written are untouched: resume from the last one"
            )
        super().__init__(
            cause.errno,
            f"table {table!r}: cannot {what} {rows} rows ({nbytes} bytes at byte {offset}) of "
            f"its store {path}: {cause.strerror or cause}{hint}",
        )
        self.table, self.path, self.nbytes = table, path, nbytes


def store_file(directory: str, table: str) -> str:
    """The path of `table`'s store file in `directory`."""
    return os.path.join(directory, f"{table}.tier")


def _runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(starts, lengths)` of the runs of consecutive values in sorted unique `ids`."""
    if ids.size == 0:
        return ids, ids
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [ids.size]))
    return starts, ends - starts


CHECKPOINT_MARKERS = ("shardrec.json", ".metadata")
"""Files of a checkpoint directory (the manifest, DCP's index): a store never goes there."""


def _refuse_checkpoint_dir(directory: str, table: str) -> None:
    """StoreLayoutError if `directory` or its parent (a plan adds `rank-<r>`) is a checkpoint."""
    for where in (directory, os.path.dirname(os.path.abspath(directory))):
        found = [m for m in CHECKPOINT_MARKERS if os.path.isfile(os.path.join(where, m))]
        if found:
            raise StoreLayoutError(
                f"table {table!r}: store directory {directory!r} is inside the checkpoint "
                f"{where!r} (it holds {found[0]}); a store is scratch of a running job and "
                "never goes into a checkpoint: set KeyValueParams.ssd_storage_directory "
                "(TieredOptions.store_dir) to another directory"
            )


class FlatFileStore:
    """The backing store of one table (see module docstring).

    Args:
        directory: where the store file goes (created if missing).
        layout: the table's layout. An existing store file for the same table must have the
            same layout (else StoreLayoutError naming each mismatch); it is overwritten: a
            store is scratch, a new run starts from the table's initial values.
        threads: I/O threads (queue depth of a large read) of an unmapped store.
        mapped: map the file into memory (True), never (False), or when it fits the map budget
            (None, the default); a store maps only where the native code builds and
            `posix_fallocate` reserved its blocks, whatever `mapped` says.

    Before anything is written the directory is checked: not writable or too little free
    space raises StoreSpaceError with the bytes the table needs.
    """

    def __init__(
        self,
        directory: str,
        layout: StoreLayout,
        *,
        threads: int = 4,
        mapped: bool | None = None,
    ) -> None:
        self.layout = layout
        self.path = store_file(directory, layout.table)
        need = layout.file_bytes
        _refuse_checkpoint_dir(directory, layout.table)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise StoreSpaceError(
                f"table {layout.table!r}: cannot create store directory {directory!r} ({e}); "
                f"the store needs {need} bytes there"
            ) from e
        if not os.access(directory, os.W_OK):
            raise StoreSpaceError(
                f"table {layout.table!r}: store directory {directory!r} is not writable; the "
                f"store needs {need} bytes there (set KeyValueParams.ssd_storage_directory)"
            )
        have = 0
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                found = decode_header(f.read(HEADER_BYTES), self.path)
            diff = layout.mismatch(found)
            if diff:
                raise StoreLayoutError(
                    f"table {layout.table!r}: store {self.path} was written for another "
                    f"layout ({'; '.join(diff)}); use another store directory or remove it"
                )
            have = os.path.getsize(self.path)
        free = shutil.disk_usage(directory).free
        if need - have > free:
            raise StoreSpaceError(
                f"table {layout.table!r}: store directory {directory!r} has {free} bytes "
                f"free, the store needs {need} bytes ({layout.num_rows} rows x "
                f"{layout.row_bytes} bytes + header)"
            )
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        reserved = True
        try:
            os.posix_fallocate(self._fd, 0, need)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                os.close(self._fd)
                raise StoreSpaceError(
                    f"table {layout.table!r}: cannot reserve {need} bytes for the store in "
                    f"{directory!r} ({e})"
                ) from e
            os.ftruncate(self._fd, need)
            reserved = False
        self._map: tuple[int, int] | None = None
        self._map_bytes = 0
        if mapped is not False and reserved and _reserve_map(need, force=mapped is True):
            address = native_map(self._fd, need)
            if address is None:
                _release_map(need)
            else:
                self._map, self._map_bytes = (address, layout.num_rows), need
        os.pwrite(self._fd, encode_header(layout), 0)
        if hasattr(os, "posix_fadvise"):  # rows are read at random: no readahead around them
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tier-io")
        self._threads = threads
        self.bytes_read = 0
        self.bytes_written = 0

    def _split(self, ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        starts, lengths = _runs(ids)
        parts = max(1, min(self._threads, starts.size // _MIN_RUNS_PER_THREAD))
        return list(zip(np.array_split(starts, parts), np.array_split(lengths, parts), strict=True))

    def read(self, ids: np.ndarray) -> np.ndarray:
        """`(n, stride)` float32 rows of sorted unique int64 `ids`."""
        out = np.empty((ids.size, self.layout.stride), dtype=np.float32)
        self._io(ids, out, write=False)
        self.bytes_read += out.nbytes
        return out

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Write `(n, stride)` float32 `rows` at sorted unique int64 `ids`."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        self._io(ids, rows, write=True)
        self.bytes_written += rows.nbytes

    def _io(self, ids: np.ndarray, buf: np.ndarray, *, write: bool) -> None:
        if ids.size == 0:
            return
        row_bytes = self.layout.row_bytes
        flat = memoryview(buf.reshape(-1).view(np.uint8).data)
        fd = self._fd
        table = self.layout.table

        mapped = self._map

        def one(starts: np.ndarray, lengths: np.ndarray) -> None:
            a, b = int(starts[0]), int(starts[-1] + lengths[-1])
            if native_rows_io(
                fd, ids[a:b], buf[a:b], row_bytes, HEADER_BYTES, write=write, mapped=mapped
            ):
                return  # else the loop below repeats the rows and reports what failed
            for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
                view = flat[s * row_bytes : (s + n) * row_bytes]
                offset = HEADER_BYTES + int(ids[s]) * row_bytes
                try:
                    done = (os.pwritev if write else os.preadv)(fd, [view], offset)
                except OSError as e:
                    raise StoreIOError(
                        table, self.path, n, len(view), offset, e, write=write
                    ) from e
                if done != len(view):
                    raise OSError(
                        errno.EIO,
                        f"table {table!r}: short {'write' if write else 'read'} of "
                        f"{self.path} at byte {offset} ({done} of {len(view)} bytes)",
                    )

        if mapped is not None and native_rows_io(
            fd, ids, buf, row_bytes, HEADER_BYTES, write=write, mapped=mapped
        ):
            return  # a mapped store copies: one call, no runs to find, no thread hand-off
        # Writes land in the page cache (the kernel writes them out): one thread does them
        # fastest; reads may wait for the disk, so they keep several in flight.
        parts = self._split(ids) if not write and mapped is None else [_runs(ids)]
        if len(parts) == 1:
            one(*parts[0])
            return
        for f in [self._pool.submit(one, s, n) for s, n in parts]:
            f.result()

    def native_map(self) -> int | None:
        """The address of the store file mapped into memory when its rows are copied in native
        code (row `i` at `HEADER_BYTES + i * row_bytes` from it), else None: not mapped, or the
        native copy replaced (a test injecting a failure on the Python path), so that every
        row goes through `read` / `write`. A caller copying rows there itself bypasses the
        byte counters (it adds to `bytes_read` / `bytes_written`)."""
        if self._map is None or native_rows_io is not _native_rows_io:
            return None
        return self._map[0]

    @property
    def mapped(self) -> bool:
        """Whether the store's file is mapped into memory (rows copied, no system calls)."""
        return self._map is not None

    def flush(self) -> None:
        """Make every written row durable (fdatasync: also the rows written through the map)."""
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self._pool.shutdown()
            if self._map is not None:
                native_unmap(self._map[0], self._map_bytes)
                _release_map(self._map_bytes)
                self._map = None
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # At interpreter shutdown there is nothing left to report an error to.
        with contextlib.suppress(Exception):
            self.close()
