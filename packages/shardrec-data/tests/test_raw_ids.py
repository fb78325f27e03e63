"""Raw-id modes (for dynamic tables): movielens-100k's user / item ids of the files, and
criteo-tsv's hex values without the modulo."""

from __future__ import annotations

import pathlib
import random

import numpy as np
import pytest
from _data_helpers import naive_criteo, random_criteo_lines, samples, write_lines

from shardrec_data import load_dataset
from shardrec_data.movielens import MovieLensConfig, build_movielens
from shardrec_data.movielens_sources import MovieLensTables

pytestmark = pytest.mark.timeout(120)


def test_criteo_tsv_raw_ids_are_the_hex_values(tmp_path: pathlib.Path) -> None:
    lines = random_criteo_lines(random.Random(7), 30)
    path = write_lines(tmp_path / "a.tsv", lines)
    ds = load_dataset("criteo-tsv", paths=[path], test_fraction=0.5, raw_ids=True)
    assert all(f.raw_ids for f in ds.sparse_features)
    got = samples(next(ds.batches("train", 100))) + samples(next(ds.batches("test", 100)))
    want = [{f"cat_{c}": [v] for c, v in enumerate(cats)} for _, _, cats in naive_criteo(lines)]
    assert [ids for _, ids, _ in got] == want
    assert max(v[0] for s in want for v in s.values()) > 100_000  # no modulo was taken
    plain = load_dataset("criteo-tsv", paths=[path], test_fraction=0.5)
    assert not any(f.raw_ids for f in plain.sparse_features)


def _tables() -> MovieLensTables:
    rng = np.random.default_rng(0)
    users = np.array([900, 7, 31, 4000])  # not dense, not sorted
    items = np.array([12, 5_000_001, 3])
    n = 40
    return MovieLensTables(
        user=users[rng.integers(0, 4, n)],
        item=items[rng.integers(0, 3, n)],
        rating=rng.integers(1, 6, n),
        user_ids=users,
        age=np.array([20, 30, 40, 50]),
        gender=("F", "M", "M", "F"),
        occupation=("engineer", "student", "writer", "other"),
        zip_code=("12345", "54321", "T8H1N", "99999"),
        item_ids=items,
        release_date=("01-Jan-1995", "", "01-Jan-1980"),
        genres=np.eye(3, 19, dtype=np.int64),
    )


def test_movielens_raw_ids_are_the_files_ids() -> None:
    tables = _tables()
    raw = build_movielens(tables, MovieLensConfig(raw_ids=True))
    mapped = build_movielens(tables, MovieLensConfig())
    feats = {f.name: f for f in raw.sparse_features}
    assert feats["user"].raw_ids and feats["item"].raw_ids and not feats["genres"].raw_ids
    assert feats["user"].num_embeddings == 4 and feats["item"].num_embeddings == 3
    got = samples(next(raw.batches("train", 100))) + samples(next(raw.batches("test", 100)))
    ref = samples(next(mapped.batches("train", 100))) + samples(next(mapped.batches("test", 100)))
    user_of = dict(enumerate(sorted(tables.user_ids.tolist())))
    item_of = dict(enumerate(sorted(tables.item_ids.tolist())))
    for (dense, ids, label), (dense_ref, ids_ref, label_ref) in zip(got, ref, strict=True):
        assert dense == dense_ref and label == label_ref
        assert ids["user"] == [user_of[i] for i in ids_ref["user"]]
        assert ids["item"] == [item_of[i] for i in ids_ref["item"]]
        assert ids["genres"] == ids_ref["genres"] and ids["gender"] == ids_ref["gender"]


def test_movielens_raw_ids_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="raw_ids must be a bool"):
        MovieLensConfig(raw_ids="yes")  # type: ignore[arg-type]
