"""`RocksRowStore`: one raw-id table's rows and optimizer state in RocksDB, keyed by raw id.

```
<directory>/<table>.rocks/       a RocksDB database (rocksdict, raw bytes mode)
  key HEADER_KEY                 the layout (layout.py), marked scratch, not a checkpoint
  key 8 bytes per id             big-endian (id XOR 2^63): byte order is numeric order
  value row_bytes                weight | state blocks, float32 (little-endian, as numpy)
```

`get(ids)` is one multi-get; `put(ids, rows)` one write batch. Tuned for point lookups: a
full-key bloom filter per table file (a miss, which every new id is, rarely touches a data
block), a block cache of `block_cache_bytes`, index and filter blocks held in that cache (so
memory stays bounded whatever the table's size), no compression (float rows do not compress),
a hash index in each data block, no write-ahead log (the store is scratch: an interrupted run
restarts from a checkpoint, never from its store, so a crash has nothing to recover).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import rocksdict

from shardrec_kvstore.layout import (
    HEADER_KEY,
    RowLayout,
    StoreLayoutError,
    decode_header,
    encode_header,
)

__all__ = ["RocksRowStore", "StoreAccessError", "store_path"]

_SIGN = np.uint64(1 << 63)


class StoreAccessError(OSError):
    """A store directory that cannot be created or written."""


def store_path(directory: str, table: str) -> str:
    """The database directory of `table`'s store in `directory`."""
    return os.path.join(directory, f"{table}.rocks")


def encode_keys(ids: np.ndarray) -> list[bytes]:
    """The 8-byte key of each int64 id (byte order = numeric order, negatives first)."""
    ordered = np.ascontiguousarray(ids, dtype=np.int64).view(np.uint64) ^ _SIGN
    keys: list[bytes] = ordered.astype(">u8").view("V8").tolist()
    return keys


def decode_keys(keys: list[bytes]) -> np.ndarray:
    """The int64 ids of 8-byte keys (`encode_keys` undone)."""
    ordered = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
    ids: np.ndarray = (ordered ^ _SIGN).view(np.int64)
    return ids


class RocksRowStore:
    """The backing store of one raw-id table (module docstring).

    Args:
        directory: where the database goes (`<directory>/<table>.rocks`, created).
        layout: the rows' layout. An existing store must be a shardrec raw-id store of the same
            layout (else StoreLayoutError naming each field that differs); it is then cleared:
            a store is scratch, a new run starts from the table's initial rows.
        block_cache_bytes: RocksDB's block cache (recently read data, index and filter blocks).
        write_buffer_bytes: memtable size before a flush to a table file
            (TorchRec's `KeyValueParams.ssd_rocksdb_write_buffer_size`).
        bloom_bits_per_key: bloom filter bits per key (10: about 1% false positives).
        mmap_reads: read table files through a memory map instead of `pread` (about 1.6x the
            random-get rate on a warm page cache, but every page read counts in the process's
            resident memory until the kernel reclaims it; off by default).

    A directory that cannot be created or written raises StoreAccessError before anything
    is written.
    """

    def __init__(
        self,
        directory: str,
        layout: RowLayout,
        *,
        block_cache_bytes: int = 64 << 20,
        write_buffer_bytes: int = 64 << 20,
        bloom_bits_per_key: int = 10,
        mmap_reads: bool = False,
    ) -> None:
        self.layout = layout
        self.path = store_path(directory, layout.table)
        table = layout.table
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise StoreAccessError(
                f"table {table!r}: cannot create store directory {directory!r} ({e}); set "
                "KeyValueParams.ssd_storage_directory to a writable directory"
            ) from e
        if not os.access(directory, os.W_OK | os.X_OK):
            raise StoreAccessError(
                f"table {table!r}: store directory {directory!r} is not writable; set "
                "KeyValueParams.ssd_storage_directory to a writable directory"
            )
        self._options = _options(
            block_cache_bytes, write_buffer_bytes, bloom_bits_per_key, mmap_reads
        )
        if os.path.exists(self.path):
            self._check_existing()
            shutil.rmtree(self.path)
        try:
            self._db = rocksdict.Rdict(self.path, self._options)
        except Exception as e:  # rocksdict raises its own exception types for I/O errors
            raise StoreAccessError(f"table {table!r}: cannot open store {self.path!r} ({e})") from e
        self._write = rocksdict.WriteOptions()
        self._write.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; rocksdict's stub says method
        self._db.set_write_options(self._write)
        self._db.put(HEADER_KEY, encode_header(layout))
        self.bytes_read = 0
        self.bytes_written = 0
        self._open = True

    def _check_existing(self) -> None:
        """Refuse to clear `self.path` unless it is a raw-id store of this layout."""
        if not os.path.isdir(self.path) or not os.path.exists(os.path.join(self.path, "CURRENT")):
            raise StoreLayoutError(
                f"table {self.layout.table!r}: {self.path} exists and is not a shardrec raw-id "
                "store; pick another store directory or remove it"
            )
        try:
            db = rocksdict.Rdict(self.path, self._options)
        except Exception as e:
            raise StoreLayoutError(
                f"table {self.layout.table!r}: {self.path} is not a readable shardrec raw-id "
                f"store ({e}); pick another store directory or remove it"
            ) from e
        try:
            found = decode_header(db.get(HEADER_KEY), self.path)
        finally:
            db.close()
        diff = self.layout.mismatch(found)
        if diff:
            raise StoreLayoutError(
                f"table {self.layout.table!r}: store {self.path} was written for another layout "
                f"({'; '.join(diff)}); use another store directory or remove it"
            )

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(rows, found)`: the `(n, stride)` float32 rows of int64 `ids` (zeros where absent)
        and whether each id is in the store. One multi-get."""
        n = int(ids.size)
        stride = self.layout.stride
        rows = np.zeros((n, stride), dtype=np.float32)
        if n == 0:
            return rows, np.zeros(0, dtype=bool)
        keys: list[Any] = encode_keys(ids)
        values: list[bytes | None] = list(self._db.get(keys) or [])
        found = np.fromiter((v is not None for v in values), dtype=np.bool_, count=n)
        data = b"".join(v for v in values if v is not None)
        k = int(found.sum())
        if len(data) != k * self.layout.row_bytes:
            raise StoreLayoutError(
                f"table {self.layout.table!r}: store {self.path} holds values of another size "
                f"({len(data)} bytes for {k} rows of {self.layout.row_bytes} bytes)"
            )
        if k:
            rows[found] = np.frombuffer(data, dtype=np.float32).reshape(k, stride)
        self.bytes_read += len(data)
        return rows, found

    def put(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Store the `(n, stride)` float32 `rows` under int64 `ids` (distinct). One write
        batch: all or nothing."""
        n = int(ids.size)
        if n == 0:
            return
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.shape != (n, self.layout.stride):
            raise ValueError(
                f"table {self.layout.table!r}: put of {n} ids needs rows of shape "
                f"({n}, {self.layout.stride}), got {rows.shape}"
            )
        values: list[bytes] = rows.view(f"V{self.layout.row_bytes}").reshape(n).tolist()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in zip(encode_keys(ids), values, strict=True):
            batch.put(key, value)
        try:
            self._db.write(batch, self._write)
        except Exception as e:
            raise OSError(
                f"table {self.layout.table!r}: cannot write {n} rows to {self.path} ({e})"
            ) from e
        self.bytes_written += rows.nbytes

    def delete(self, ids: np.ndarray) -> None:
        """Forget `ids` (absent ones are ignored). One write batch."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key in encode_keys(ids):
            batch.delete(key)
        self._db.write(batch, self._write)

    def ids(self, chunk: int = 1 << 16) -> Iterator[np.ndarray]:
        """Every id the store holds, in key order (negatives first), `chunk` at a time:
        one pass of a RocksDB iterator over the keys (the rows are not read)."""
        keys: list[bytes] = []
        for key in self._db.keys():  # noqa: SIM118  # an Rdict is not iterable
            if not isinstance(key, bytes) or len(key) != 8:  # the layout header
                continue
            keys.append(key)
            if len(keys) == chunk:
                yield decode_keys(keys)
                keys = []
        if keys:
            yield decode_keys(keys)

    def clear(self) -> None:
        """Forget every row (the layout header stays)."""
        for chunk in list(self.ids()):
            self.delete(chunk)

    def flush(self) -> None:
        """Move the memtable to a table file on disk (the store keeps no write-ahead log)."""
        self._db.flush()

    def approximate_rows(self) -> int:
        """RocksDB's estimate of the rows held (exact only after a compaction)."""
        estimate = self._db.property_int_value("rocksdb.estimate-num-keys") or 0
        return max(0, int(estimate) - 1)  # the header

    def disk_bytes(self) -> int:
        """Bytes of the database's files on disk."""
        return sum(
            os.path.getsize(os.path.join(self.path, f))
            for f in os.listdir(self.path)
            if os.path.isfile(os.path.join(self.path, f))
        )

    def close(self) -> None:
        if getattr(self, "_open", False):
            self._open = False
            self._db.close()

    def __del__(self) -> None:
        # At interpreter shutdown there is nothing left to report an error to.
        with contextlib.suppress(Exception):
            self.close()


def _options(
    block_cache: int, write_buffer: int, bloom_bits: int, mmap_reads: bool
) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(bloom_bits, False)
    table.set_block_cache(rocksdict.Cache(block_cache))
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # a hash index inside each data block: a point lookup skips the binary search
    table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
    table.set_data_block_hash_ratio(0.75)
    options.set_block_based_table_factory(table)
    options.set_write_buffer_size(write_buffer)
    options.set_compression_type(rocksdict.DBCompressionType.none())
    options.set_max_background_jobs(2)
    options.set_keep_log_file_num(2)
    options.set_allow_mmap_reads(mmap_reads)
    return options
