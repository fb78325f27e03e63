"""TorchRec-named pipes (datapipes, Criteo TSV, MovieLens 20M/25M) against naive readers."""

from __future__ import annotations

import csv
import pathlib
import random
from types import SimpleNamespace

import pytest
from torch.utils.data import DataLoader

from shardrec_data import criteo_kaggle, criteo_terabyte, datapipes, movielens_20m, movielens_25m
from shardrec_data.datapipes import (
    Limit,
    LoadFiles,
    ParallelReadConcat,
    ReadLinesFromCSV,
    idx_split_train_val,
    rand_split_train_val,
)


def _rows(n: int) -> list[int]:
    return list(range(n))


@pytest.mark.parametrize(("n", "perc", "places"), [(1000, 0.5, 2), (997, 0.37, 2), (50, 0.123, 3)])
def test_idx_split_follows_the_last_digits_rule(n: int, perc: float, places: int) -> None:
    train, val = idx_split_train_val(_rows(n), perc, decimal_places=places)
    scale = 10**places
    expected = [i for i in range(n) if i % scale < round(perc * scale)]
    assert list(train) == expected
    assert list(val) == [i for i in range(n) if i not in set(expected)]


def test_rand_split_is_disjoint_complete_and_repeatable() -> None:
    train, val = rand_split_train_val(_rows(5000), 0.7, random_seed=3)
    t, v = list(train), list(val)
    assert sorted(t + v) == _rows(5000) and not set(t) & set(v)
    assert list(train) == t  # a second pass replays the same draws
    rng = random.Random(3)
    assert t == [i for i in range(5000) if rng.random() < 0.7]


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 2.0])
def test_splits_reject_train_perc_outside_open_unit_interval(bad: float) -> None:
    for split in (idx_split_train_val, rand_split_train_val):
        with pytest.raises(ValueError, match="train_perc"):
            split(_rows(3), bad)


def test_limit_and_functional_form() -> None:
    assert list(Limit(_rows(10), 3)) == [0, 1, 2]
    assert list(Limit(_rows(2), 5)) == [0, 1]
    assert list(Limit(_rows(4), 0)) == []
    assert list(idx_split_train_val(_rows(100), 0.5)[0].limit(4)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="limit"):
        Limit(_rows(3), -1)


@pytest.mark.parametrize(("pipes", "workers"), [(10, 4), (7, 7), (5, 2), (3, 1)])
def test_parallel_read_concat_splits_pipes_over_workers(
    monkeypatch: pytest.MonkeyPatch, pipes: int, workers: int
) -> None:
    dps = [[(p, i) for i in range(3)] for p in range(pipes)]
    seen = []
    shares = []
    for worker in range(workers):
        monkeypatch.setattr(
            datapipes,
            "get_worker_info",
            lambda w=worker: SimpleNamespace(id=w, num_workers=workers),
        )
        got = list(ParallelReadConcat(*dps))
        seen += got
        shares.append(len(got) // 3)
    assert seen == [x for dp in dps for x in dp]  # each pipe read once, in order
    assert max(shares) - min(shares) <= 1 and shares == sorted(shares, reverse=True)


def test_parallel_read_concat_refuses_more_workers_than_pipes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(datapipes, "get_worker_info", lambda: SimpleNamespace(id=0, num_workers=3))
    with pytest.raises(ValueError, match="workers"):
        list(ParallelReadConcat([1], [2]))


def test_load_files_and_csv_lines(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("h1,h2\n1,x\n2,y\n")
    rows = list(ReadLinesFromCSV(LoadFiles([str(path)], mode="r"), skip_first_line=True))
    assert rows == [["1", "x"], ["2", "y"]]
    with pytest.raises(ValueError, match="mode"):
        LoadFiles([str(path)], mode="w")
    with pytest.raises(TypeError, match="string"):
        list(LoadFiles([pathlib.Path(path)]))  # type: ignore[list-item]


# --- Criteo TSV -----------------------------------------------------------------------------------


def _criteo_lines(n: int, seed: int, label: bool = True) -> list[list[str]]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        ints = [rng.choice(["", str(rng.randint(-3, 900))]) for _ in range(13)]
        cats = [rng.choice(["", f"{rng.getrandbits(32):08x}"]) for _ in range(26)]
        lines.append(([str(rng.randint(0, 1))] if label else []) + ints + cats)
    return lines


def _write_tsv(path: pathlib.Path, lines: list[list[str]]) -> str:
    path.write_text("".join("\t".join(line) + "\n" for line in lines))
    return str(path)


def _naive(line: list[str]) -> dict[str, int | str]:
    names = ["label"] + [f"int_{i}" for i in range(13)] + [f"cat_{i}" for i in range(26)]
    names = names[len(names) - len(line) :]
    return {
        k: (v if k.startswith("cat") else int(v) if v else 0)
        for k, v in zip(names, line, strict=True)
    }


def test_criteo_terabyte_rows_match_a_naive_parser(tmp_path: pathlib.Path) -> None:
    days = [_criteo_lines(7, seed) for seed in range(3)]
    paths = [_write_tsv(tmp_path / f"day_{i}.tsv", d) for i, d in enumerate(days)]
    assert list(criteo_terabyte(paths)) == [_naive(line) for d in days for line in d]
    raw = list(criteo_terabyte(paths[:1], row_mapper=None))
    assert raw == days[0]


def test_criteo_kaggle_test_file_has_no_label(tmp_path: pathlib.Path) -> None:
    lines = _criteo_lines(5, 9, label=False)
    got = list(criteo_kaggle(_write_tsv(tmp_path / "test.txt", lines)))
    assert got == [_naive(line) for line in lines] and "label" not in got[0]


def test_criteo_rejects_lines_with_too_many_fields(tmp_path: pathlib.Path) -> None:
    path = _write_tsv(tmp_path / "bad.tsv", [["1"] * 41])
    with pytest.raises(ValueError, match="at most 40"):
        list(criteo_kaggle(path))


def test_criteo_workers_read_every_file_once(tmp_path: pathlib.Path) -> None:
    days = [_criteo_lines(5, seed) for seed in range(3)]
    paths = [_write_tsv(tmp_path / f"d{i}.tsv", d) for i, d in enumerate(days)]
    loader = DataLoader(criteo_terabyte(paths), batch_size=None, num_workers=2)
    labels = sorted(int(row["label"]) for row in loader)
    assert labels == sorted(int(line[0]) for d in days for line in d)


# --- MovieLens ------------------------------------------------------------------------------------


def _write_csv(path: pathlib.Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.parametrize("reader", [movielens_20m, movielens_25m])
def test_movielens_rows_and_movie_join(tmp_path: pathlib.Path, reader: object) -> None:
    ratings = [["3", "7", "4.5", "100"], ["1", "2", "", "x"]]
    _write_csv(tmp_path / "ratings.csv", [["userId", "movieId", "rating", "timestamp"], *ratings])
    _write_csv(
        tmp_path / "movies.csv",
        [
            ["movieId", "title", "genres"],
            ["2", "B, the movie", "Drama"],
            ["7", "A", "Action|Comedy"],
        ],
    )
    assert callable(reader)
    plain = list(reader(str(tmp_path)))
    assert plain == [
        {"userId": 3, "movieId": 7, "rating": 4.5, "timestamp": 100},
        {"userId": 1, "movieId": 2, "rating": 0.0, "timestamp": 0},
    ]
    joined = list(reader(str(tmp_path), include_movies_data=True))
    assert [(r["title"], r["genres"]) for r in joined] == [
        ("A", "Action|Comedy"),
        ("B, the movie", "Drama"),
    ]
    _write_csv(
        tmp_path / "ratings.csv",
        [["userId", "movieId", "rating", "timestamp"], ["1", "99", "1", "1"]],
    )
    with pytest.raises(ValueError, match="movieId '99'"):
        list(reader(str(tmp_path), include_movies_data=True))
