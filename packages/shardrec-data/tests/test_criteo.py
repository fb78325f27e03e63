"""Criteo TSV parsing, the criteo-tsv and criteo-npy datasets and preprocessing."""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest
from _data_helpers import log1p_clamped, naive_criteo, random_criteo_lines, samples, write_lines

from shardrec_data import load_dataset, preprocess_criteo, read_tsv
from shardrec_data.criteo_format import read_tsv_blocks

pytestmark = pytest.mark.timeout(120)


def _expected_samples(lines: list[str], sizes: list[int]):
    return [
        (
            [log1p_clamped(x) for x in dense],
            {f"cat_{c}": [v % sizes[c]] for c, v in enumerate(cats)},
            float(label),
        )
        for label, dense, cats in naive_criteo(lines)
    ]


def _close(got, want) -> None:
    assert len(got) == len(want)
    for (gd, gf, gl), (wd, wf, wl) in zip(got, want, strict=True):
        assert gf == wf and gl == wl
        assert np.allclose(gd, wd, rtol=1e-6)


@pytest.mark.parametrize("block_bytes", [1 << 24, 700])
def test_parse_matches_naive_reader(tmp_path: pathlib.Path, block_bytes: int) -> None:
    lines = random_criteo_lines(random.Random(block_bytes), 50)
    path = write_lines(tmp_path / "day_0.tsv", lines)
    blocks = list(read_tsv_blocks(path, block_bytes=block_bytes))
    if block_bytes == 700:
        assert len(blocks) > 1
    got = [
        (int(b.labels[i]), b.dense[i].tolist(), b.cats[i].tolist())
        for b in blocks
        for i in range(len(b))
    ]
    assert got == naive_criteo(lines)


def test_hex_of_any_length_up_to_15_digits(tmp_path: pathlib.Path) -> None:
    rng = random.Random(9)
    lines = random_criteo_lines(rng, 20)
    odd = ["a", "00fF", "7" * 15, "0", "123456789"]
    lines = [
        "\t".join([*line.split("\t")[:14], *(rng.choice(odd) for _ in range(26))]) for line in lines
    ]
    path = write_lines(tmp_path / "odd.tsv", lines)
    raw = read_tsv(path)
    assert raw.cats.tolist() == [cats for _, _, cats in naive_criteo(lines)]


def test_all_empty_fields_and_no_trailing_newline(tmp_path: pathlib.Path) -> None:
    line = "\t".join(["0"] + [""] * 39)
    path = tmp_path / "x.tsv"
    path.write_text(line + "\n" + line.replace("0", "1", 1))
    raw = read_tsv(path)
    assert raw.labels.tolist() == [0, 1]
    assert not raw.dense.any() and not raw.cats.any()
    assert len(read_tsv(write_lines(tmp_path / "empty.tsv", []))) == 0


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("1\t2\t3", "expected 40 tab-separated fields, got 3"),
        ("", "expected 40 tab-separated fields, got 1"),
        ("2" + "\t" * 39, "label must be 0 or 1, got 2"),
        ("\t" * 39, "label must be 0 or 1, got ''"),
        ("0\tx" + "\t" * 38, "int_0 must be an integer or empty, got 'x'"),
        ("0" + "\t" * 14 + "zz" + "\t" * 25, "cat_0 must be hexadecimal .* got 'zz'"),
        ("0" + "\t" * 15 + "68fd1e6g" + "\t" * 24, "cat_1 must be hexadecimal .* got '68fd1e6g'"),
        ("0" + "\t" * 39 + "1" * 16, "cat_25 must be hexadecimal .* got '1111111111111111'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: pathlib.Path, bad: str, match: str) -> None:
    lines = random_criteo_lines(random.Random(1), 6)
    lines.insert(3, bad)
    path = write_lines(tmp_path / "day_3.tsv", lines)
    with pytest.raises(ValueError, match=rf"{path}:4: {match}"):
        read_tsv(path)
    with pytest.raises(ValueError, match=rf"{path}:4: "):
        load_dataset("criteo-tsv", paths=[path])


@pytest.mark.parametrize("num_embeddings", [1000, list(range(3, 29))])
def test_tsv_dataset_last_file_is_test(tmp_path: pathlib.Path, num_embeddings) -> None:
    rng = random.Random(3)
    days = [random_criteo_lines(rng, n) for n in (20, 15, 9)]
    for i, lines in enumerate(days):
        write_lines(tmp_path / f"day_{i}.tsv", lines)
    (tmp_path / "notes.txt").write_text("not a day")
    ds = load_dataset("criteo-tsv", data_dir=tmp_path, num_embeddings=num_embeddings)
    sizes = [num_embeddings] * 26 if isinstance(num_embeddings, int) else num_embeddings
    assert [f.num_embeddings for f in ds.sparse_features] == sizes
    assert ds.num_dense == 13
    _close(samples(next(ds.batches("train", 100))), _expected_samples(days[0] + days[1], sizes))
    _close(samples(next(ds.batches("test", 100))), _expected_samples(days[2], sizes))


def test_tsv_split_by_fraction_and_single_file(tmp_path: pathlib.Path) -> None:
    rng = random.Random(4)
    a, b = random_criteo_lines(rng, 12), random_criteo_lines(rng, 8)
    pa, pb = write_lines(tmp_path / "a.tsv", a), write_lines(tmp_path / "b.tsv", b)
    ds = load_dataset("criteo-tsv", paths=[pa, pb], test_fraction=0.25)
    sizes = [100_000] * 26
    want = _expected_samples(a + b, sizes)
    _close(samples(next(ds.batches("train", 100))), want[:15])
    _close(samples(next(ds.batches("test", 100))), want[15:])
    single = load_dataset("criteo-tsv", paths=str(pa))
    assert (single.num_samples("train"), single.num_samples("test")) == (11, 1)
    # Shuffled, sharded batches of a split that spans both files.
    got = [
        s
        for r in range(2)
        for bt in ds.batches("train", 4, rank=r, world_size=2, shuffle=True, seed=2)
        for s in samples(bt)
    ]
    assert sorted(map(repr, got)) != [] and len(got) == 14
    assert {repr(s) for s in got} <= {repr(s) for s in samples(next(ds.batches("train", 100)))}


def _remap(
    lines_per_day: list[list[str]], threshold: int
) -> tuple[list[dict[int, int]], list[int]]:
    counts: list[dict[int, int]] = [{} for _ in range(26)]
    for lines in lines_per_day:
        for _, _, cats in naive_criteo(lines):
            for c, v in enumerate(cats):
                counts[c][v] = counts[c].get(v, 0) + 1
    maps = []
    for c in range(26):
        kept = sorted(v for v, n in counts[c].items() if n >= threshold)
        maps.append({v: i + 1 for i, v in enumerate(kept)})
    return maps, [len(m) + 1 for m in maps]


@pytest.mark.parametrize("threshold", [1, 3, 10_000])
def test_preprocess_round_trip(tmp_path: pathlib.Path, threshold: int) -> None:
    rng = random.Random(threshold)
    days = [random_criteo_lines(rng, n) for n in (30, 25)]
    paths = [write_lines(tmp_path / f"in_{i}.tsv", lines) for i, lines in enumerate(days)]
    out = tmp_path / "npy"
    sizes = preprocess_criteo(paths, out, frequency_threshold=threshold)
    maps, want_sizes = _remap(days, threshold)
    assert sizes == want_sizes
    if threshold == 10_000:
        assert sizes == [1] * 26  # every id is rare: all share id 0
    meta = json.loads((out / "cardinalities.json").read_text())
    assert meta["num_embeddings"] == sizes and meta["frequency_threshold"] == threshold
    assert np.load(out / "day_0_dense.npy").dtype == np.float32
    assert np.load(out / "day_1_sparse.npy").shape == (25, 26)

    npy = load_dataset("criteo-npy", data_dir=out)
    tsv = load_dataset("criteo-tsv", paths=paths, num_embeddings=2**40)
    assert [f.num_embeddings for f in npy.sparse_features] == sizes
    for split in ("train", "test"):
        for kw in ({}, {"shuffle": True, "seed": 1, "epoch": 2, "rank": 1, "world_size": 2}):
            want = []
            for dense, feats, label in samples(next(tsv.batches(split, 100, **kw))):
                remapped = {k: [maps[int(k[4:])].get(v[0], 0)] for k, v in feats.items()}
                want.append((dense, remapped, label))
            _close(samples(next(npy.batches(split, 100, **kw))), want)


def test_npy_reads_torchrec_layout_with_modulo(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    for day, n in ((0, 7), (1, 5)):
        np.save(tmp_path / f"day_{day}_dense.npy", rng.random((n, 13), dtype=np.float32))
        np.save(tmp_path / f"day_{day}_sparse.npy", rng.integers(0, 10**6, (n, 26)))
        np.save(tmp_path / f"day_{day}_labels.npy", rng.integers(0, 2, (n, 1)).astype(np.int32))
    ds = load_dataset("criteo-npy", data_dir=tmp_path, num_embeddings=1000, test_fraction=0.5)
    assert (ds.num_samples("train"), ds.num_samples("test")) == (6, 6)
    b = next(ds.batches("test", 6))
    sparse = np.concatenate([np.load(tmp_path / f"day_{d}_sparse.npy") for d in (0, 1)])
    assert b.sparse_features.values().tolist() == (sparse[6:] % 1000).T.reshape(-1).tolist()
    labels = np.concatenate([np.load(tmp_path / f"day_{d}_labels.npy") for d in (0, 1)])
    assert b.labels.tolist() == labels[6:, 0].astype(float).tolist()
    only_day_1 = load_dataset("criteo-npy", data_dir=tmp_path, days=[1], num_embeddings=5)
    assert (only_day_1.num_samples("train"), only_day_1.num_samples("test")) == (4, 1)


def test_npy_bad_inputs(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "none")):
        load_dataset("criteo-npy", data_dir=tmp_path / "none")
    with pytest.raises(FileNotFoundError, match="day_"):
        load_dataset("criteo-npy", data_dir=tmp_path)
    np.save(tmp_path / "day_0_dense.npy", np.zeros((4, 13), np.float32))
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((4, 26), np.int32))
    with pytest.raises(FileNotFoundError, match=r"day_0_labels\.npy"):
        load_dataset("criteo-npy", data_dir=tmp_path, num_embeddings=10)
    np.save(tmp_path / "day_0_labels.npy", np.zeros(4, np.int32))
    with pytest.raises(FileNotFoundError, match=r"cardinalities\.json.*preprocess"):
        load_dataset("criteo-npy", data_dir=tmp_path)
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((4, 25), np.int32))
    with pytest.raises(ValueError, match=r"day_0_sparse.npy has shape \(4, 25\)"):
        load_dataset("criteo-npy", data_dir=tmp_path, num_embeddings=10)
    with pytest.raises(ValueError, match="needs data_dir="):
        load_dataset("criteo-npy")
    with pytest.raises(
        ValueError, match=r"num_embeddings must be a positive int or 26 of them, got \[1, 2\]"
    ):
        load_dataset("criteo-npy", data_dir=tmp_path, num_embeddings=[1, 2])


def test_tsv_bad_inputs(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "missing.tsv")):
        load_dataset("criteo-tsv", paths=[tmp_path / "missing.tsv"])
    with pytest.raises(ValueError, match="exactly one of paths="):
        load_dataset("criteo-tsv")
    with pytest.raises(FileNotFoundError, match=r"holds no file matching day_.*\.tsv"):
        load_dataset("criteo-tsv", data_dir=tmp_path)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\) or None, got 2"):
        load_dataset("criteo-tsv", paths=["x"], test_fraction=2)


def test_preprocess_bad_inputs(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "no.tsv")):
        preprocess_criteo([tmp_path / "no.tsv"], tmp_path / "out")
    with pytest.raises(ValueError, match="frequency_threshold must be >= 0, got -1"):
        preprocess_criteo([tmp_path / "no.tsv"], tmp_path / "out", frequency_threshold=-1)
    with pytest.raises(ValueError, match="tsv_paths is empty"):
        preprocess_criteo([], tmp_path / "out")


def test_old_module_command_points_to_the_shardrec_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardrec_data.criteo_preprocess", "day_0.tsv"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "shardrec preprocess-criteo" in done.stderr
