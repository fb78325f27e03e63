"""`RocksRowStore` against a Python dict of id -> row (random raw int64 ids, negatives and the
int64 extremes included, overwrites, reopen; listing every id, clearing), and its promised
refusals: a store of another layout, a directory that is not a store, a directory that cannot
be written."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import rocksdict

from shardrec_kvstore import (
    RocksRowStore,
    RowLayout,
    StoreAccessError,
    StoreLayoutError,
    encode_keys,
    store_path,
)
from shardrec_kvstore.layout import HEADER_KEY

LAYOUT = RowLayout(table="t", dim=4, state=(("momentum1", 1),))
EXTREMES = np.array([-(2**63), 2**63 - 1, -1, 0, 1], dtype=np.int64)


def raw_ids(rng: np.random.Generator, n: int, pool: np.ndarray) -> np.ndarray:
    return np.unique(rng.choice(pool, size=n))


@pytest.mark.parametrize("mmap_reads", [False, True])
def test_matches_a_dict_model(tmp_path: pathlib.Path, mmap_reads: bool) -> None:
    rng = np.random.default_rng(7)
    pool = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 60, dtype=np.int64), EXTREMES])
    store = RocksRowStore(str(tmp_path), LAYOUT, mmap_reads=mmap_reads)
    model: dict[int, np.ndarray] = {}
    for step in range(40):
        ids = raw_ids(rng, 12, pool)
        rows, found = store.get(ids)
        for i, key in enumerate(ids.tolist()):
            assert found[i] == (key in model)
            if key in model:
                np.testing.assert_array_equal(rows[i], model[key])
        put = raw_ids(rng, 9, pool)
        values = rng.standard_normal((put.size, LAYOUT.stride)).astype(np.float32)
        store.put(put, values)
        model.update(zip(put.tolist(), values, strict=True))
        if step % 13 == 0:
            store.flush()  # reads then come from table files, not the memtable
    everything = np.array(sorted(model), dtype=np.int64)
    rows, found = store.get(everything)
    assert found.all()
    np.testing.assert_array_equal(rows, np.stack([model[k] for k in everything.tolist()]))
    assert store.bytes_written > 0 and store.bytes_read > 0
    listed = np.concatenate(list(store.ids(chunk=7)))  # the header key is not an id
    np.testing.assert_array_equal(listed, everything)  # numeric order, negatives first
    store.clear()
    assert list(store.ids()) == [] and not store.get(everything)[1].any()
    store.close()


def test_key_order_is_numeric_order() -> None:
    ids = np.array([-(2**63), -5, -1, 0, 3, 2**62, 2**63 - 1], dtype=np.int64)
    keys = encode_keys(ids)
    assert all(len(k) == 8 for k in keys)
    assert keys == sorted(keys)
    assert len(set(keys)) == ids.size


def test_empty_calls_and_bad_row_shape(tmp_path: pathlib.Path) -> None:
    store = RocksRowStore(str(tmp_path), LAYOUT)
    rows, found = store.get(np.zeros(0, dtype=np.int64))
    assert rows.shape == (0, LAYOUT.stride) and found.size == 0
    store.put(np.zeros(0, dtype=np.int64), np.zeros((0, LAYOUT.stride), dtype=np.float32))
    with pytest.raises(ValueError, match=r"rows of shape \(2, 5\)"):
        store.put(np.array([1, 2]), np.zeros((2, 4), dtype=np.float32))
    store.close()


def test_refuses_values_of_another_size(tmp_path: pathlib.Path) -> None:
    store = RocksRowStore(str(tmp_path), LAYOUT)
    store._db.put(encode_keys(np.array([9]))[0], b"short")  # a corrupted value
    with pytest.raises(StoreLayoutError, match=r"values of another size \(5 bytes for 1 rows"):
        store.get(np.array([9]))
    store.close()


def test_a_store_is_scratch_and_says_so(tmp_path: pathlib.Path) -> None:
    store = RocksRowStore(str(tmp_path), LAYOUT)
    store.put(np.array([5]), np.ones((1, LAYOUT.stride), dtype=np.float32))
    store.close()
    db = rocksdict.Rdict(store_path(str(tmp_path), "t"), rocksdict.Options(raw_mode=True))
    header = json.loads(db.get(HEADER_KEY))
    db.close()
    assert "not a checkpoint" in header["kind"] and header["dim"] == 4
    # the same layout opens again, cleared: a new run starts from initial rows
    again = RocksRowStore(str(tmp_path), LAYOUT)
    assert not again.get(np.array([5]))[1].any()
    again.close()


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (RowLayout(table="t", dim=8, state=(("momentum1", 1),)), "dim"),
        (RowLayout(table="t", dim=4, state=(("momentum1", 4),)), "state"),
        (RowLayout(table="t", dim=4), "state"),
    ],
)
def test_refuses_a_store_of_another_layout(
    tmp_path: pathlib.Path, other: RowLayout, field: str
) -> None:
    RocksRowStore(str(tmp_path), LAYOUT).close()
    with pytest.raises(StoreLayoutError, match=rf"another layout \({field}: this table has"):
        RocksRowStore(str(tmp_path), other)
    # the refused store is untouched
    RocksRowStore(str(tmp_path), LAYOUT).close()


def test_refuses_a_directory_that_is_not_a_store(tmp_path: pathlib.Path) -> None:
    path = pathlib.Path(store_path(str(tmp_path), "t"))
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(StoreLayoutError, match="not a shardrec raw-id store"):
        RocksRowStore(str(tmp_path), LAYOUT)
    assert (path / "notes.txt").read_text() == "mine"
    # another RocksDB database without our header
    other = tmp_path / "other"
    db = rocksdict.Rdict(store_path(str(other), "t"), rocksdict.Options(raw_mode=True))
    db.put(b"k", b"v")
    db.close()
    with pytest.raises(StoreLayoutError, match="not a shardrec raw-id store"):
        RocksRowStore(str(other), LAYOUT)


def test_refuses_a_directory_it_cannot_create(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreAccessError, match=r"table 't': cannot create store directory"):
        RocksRowStore(str(blocker / "store"), LAYOUT)


def test_refuses_a_directory_it_cannot_write(tmp_path: pathlib.Path) -> None:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
    else:  # root writes through permission bits; procfs refuses everyone
        if not os.path.isdir("/proc/self"):
            pytest.skip("running as root without procfs: no unwritable directory to try")
        locked = pathlib.Path("/proc/self")
    try:
        with pytest.raises(StoreAccessError, match="is not writable"):
            RocksRowStore(str(locked), LAYOUT)
    finally:
        if os.geteuid() != 0:
            locked.chmod(0o700)


def test_layout_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="dim must be an int >= 1"):
        RowLayout(table="t", dim=0)
    with pytest.raises(ValueError, match="hold float32"):
        RowLayout(table="t", dim=4, dtype="float16")
