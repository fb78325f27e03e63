"""The store's native row I/O (`native_io.py`) against its Python path: the same bytes in the
file and read back, for scattered ids and runs of consecutive ones; a failing call reports
nothing and returns False, so the Python path repeats it and names the error."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import shardrec_tiered.store as store_module
from shardrec_tiered.layout import HEADER_BYTES, StoreLayout
from shardrec_tiered.native_io import native_rows_io
from shardrec_tiered.store import FlatFileStore

LAYOUT = StoreLayout(table="t", num_rows=5000, dim=8, state=(("momentum1", 1),))


def _ids(rng: np.random.Generator) -> np.ndarray:
    scattered = rng.integers(0, LAYOUT.num_rows, 300)
    runs = np.concatenate([np.arange(s, s + 40) for s in (0, 1000, LAYOUT.num_rows - 40)])
    return np.unique(np.concatenate([scattered, runs]))


@pytest.mark.parametrize("threads", [1, 4])
def test_native_and_python_paths_agree(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    rng = np.random.default_rng(0)
    stores = {
        "native": FlatFileStore(str(tmp_path / "a"), LAYOUT, threads=threads),
        "python": FlatFileStore(str(tmp_path / "b"), LAYOUT, threads=threads),
    }
    ids = _ids(rng)
    rows = rng.standard_normal((ids.size, LAYOUT.stride)).astype(np.float32)
    stores["native"].write(ids, rows)
    with monkeypatch.context() as m:
        m.setattr(store_module, "native_rows_io", lambda *a, **k: False)
        stores["python"].write(ids, rows)
        from_python = stores["native"].read(ids)
    from_native = stores["python"].read(ids)
    assert np.array_equal(from_python, rows) and np.array_equal(from_native, rows)
    a, b = (pathlib.Path(s.path).read_bytes() for s in stores.values())
    assert a == b


def test_a_failing_call_returns_false(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\0" * (HEADER_BYTES + 10 * LAYOUT.row_bytes))
    ids = np.array([3, 9, 10], dtype=np.int64)  # row 10 lies past the end: a short read
    buf = np.empty((3, LAYOUT.stride), dtype=np.float32)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert native_rows_io(fd, ids[:2], buf[:2], LAYOUT.row_bytes, HEADER_BYTES, write=False)
        assert not native_rows_io(fd, ids, buf, LAYOUT.row_bytes, HEADER_BYTES, write=False)
        assert not native_rows_io(fd, ids[:2], buf[:2], LAYOUT.row_bytes, HEADER_BYTES, write=True)
    finally:
        os.close(fd)
