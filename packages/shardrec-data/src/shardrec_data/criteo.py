"""The Criteo datasets: ``criteo-tsv`` (raw TSV files) and ``criteo-npy`` (preprocessed days).

Both give 13 dense features ``log(1 + max(x, 0))`` and 26 single-id sparse features named
``cat_0`` .. ``cat_25`` (TorchRec's names).

criteo-tsv: the files are parsed into memory (157 bytes a sample), ids are the hex value
modulo ``num_embeddings`` (per feature, default 100,000 as TorchRec's DLRM example). For a full
Criteo day (45M lines) preprocess to ``.npy`` instead.

criteo-npy: TorchRec's per-day layout, memory-mapped::

    day_{i}_dense.npy   float32 (N, 13)  already log-transformed
    day_{i}_sparse.npy  integer (N, 26)  ids
    day_{i}_labels.npy  integer (N,) or (N, 1)
    cardinalities.json  {"num_embeddings": [26 ints], ...}   (written by preprocess_criteo)

Split rule (both): with ``test_fraction`` left out, the last file (day) is the test split and the
others the train split (one file alone: its last 10% are the test split); with
``test_fraction=f``, the last ``max(1, round(N * f))`` samples of all N, in file order, are the
test split.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardrec_data.arrays import (
    ArrayDataset,
    ConcatArrays,
    IdMatrix,
    SplitArrays,
    concat_arrays,
)
from shardrec_data.criteo_format import (
    CAT_NAMES,
    NUM_DENSE,
    NUM_SPARSE,
    RawCriteo,
    log_transform,
    read_tsv_blocks,
)
from shardrec_data.dataset import SparseFeature, int_list_option

__all__ = [
    "CARDINALITIES_FILE",
    "CriteoNpyConfig",
    "CriteoTsvConfig",
    "load_criteo_npy",
    "load_criteo_tsv",
    "npy_day_paths",
]

CARDINALITIES_FILE = "cardinalities.json"
DEFAULT_NUM_EMBEDDINGS = 100_000
_SINGLE_FILE_TEST_FRACTION = 0.1
PathLike = str | pathlib.Path


def _table_sizes(name: str, value: int | Sequence[int]) -> tuple[int, ...]:
    sizes = (value,) * NUM_SPARSE if isinstance(value, int) else tuple(value)
    if len(sizes) != NUM_SPARSE or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes
    ):
        raise ValueError(
            f"{name}: num_embeddings must be a positive int or {NUM_SPARSE} of them, got {value!r}"
        )
    return sizes


def _one_or_many(name: str, value: object) -> object:
    parsed = int_list_option(f"{name}: num_embeddings", value)
    return parsed[0] if isinstance(parsed, tuple) and len(parsed) == 1 else parsed


def _check_fraction(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, int | float) or not 0 < value < 1):
        raise ValueError(f"{name}: test_fraction must be in (0, 1) or None, got {value!r}")


def _features(sizes: Sequence[int], raw_ids: bool = False) -> tuple[SparseFeature, ...]:
    return tuple(
        SparseFeature(n, s, raw_ids=raw_ids) for n, s in zip(CAT_NAMES, sizes, strict=True)
    )


def _split(parts: list[SplitArrays], test_fraction: float | None) -> tuple[ConcatArrays, ...]:
    """(train, test) by the module's split rule."""
    if test_fraction is None and len(parts) >= 2:
        return ConcatArrays(parts[:-1]), ConcatArrays(parts[-1:])
    fraction = _SINGLE_FILE_TEST_FRACTION if test_fraction is None else test_fraction
    total = sum(len(p) for p in parts)
    cut = total - (max(1, round(total * fraction)) if total > 1 else 0)
    train: list[SplitArrays] = []
    test: list[SplitArrays] = []
    at = 0
    for p in parts:
        n = len(p)
        if at + n <= cut:
            train.append(p)
        elif at >= cut:
            test.append(p)
        else:
            train.append(p.slice(0, cut - at))
            test.append(p.slice(cut - at, n))
        at += n
    return ConcatArrays(train or [parts[0].slice(0, 0)]), ConcatArrays(
        test or [parts[-1].slice(0, 0)]
    )


# --- criteo-tsv ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CriteoTsvConfig:
    """Options of ``criteo-tsv``: give ``paths`` or ``data_dir`` (its ``day_*.tsv`` files).

    Attributes:
        paths: TSV files, in order (the last is the test split unless ``test_fraction``).
        data_dir: a directory whose ``day_<i>.tsv`` files are used, ordered by i.
        num_embeddings: rows per table (ids are hex values modulo it): one int or 26.
        test_fraction: see the module docstring.
        raw_ids: keep each categorical value as its raw int64 (the hex value, no modulo;
            ``SparseFeature.raw_ids``) for dynamic tables; ``num_embeddings`` is then a
            capacity hint.
    """

    paths: PathLike | Sequence[PathLike] | None = None
    data_dir: PathLike | None = None
    num_embeddings: int | Sequence[int] = DEFAULT_NUM_EMBEDDINGS
    test_fraction: float | None = None
    raw_ids: bool = False

    def __post_init__(self) -> None:
        if (self.paths is None) == (self.data_dir is None):
            raise ValueError(
                "criteo-tsv: give exactly one of paths= (TSV files) or data_dir= (a directory "
                f"of day_<i>.tsv files); got paths={self.paths!r}, data_dir={self.data_dir!r}"
            )
        object.__setattr__(self, "num_embeddings", _one_or_many("criteo-tsv", self.num_embeddings))
        _table_sizes("criteo-tsv", self.num_embeddings)
        _check_fraction("criteo-tsv", self.test_fraction)

    def files(self) -> list[pathlib.Path]:
        """The TSV files, checked to exist."""
        if self.data_dir is not None:
            return _day_files(pathlib.Path(self.data_dir).expanduser(), r"day_(\d+)\.tsv")
        raw = [self.paths] if isinstance(self.paths, str | pathlib.Path) else self.paths
        assert raw is not None
        files = [pathlib.Path(p).expanduser() for p in raw]
        if not files:
            raise ValueError("criteo-tsv: paths is empty; list at least one TSV file")
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"criteo-tsv: TSV file {f} does not exist")
        return files


def _day_files(data_dir: pathlib.Path, pattern: str) -> list[pathlib.Path]:
    if not data_dir.is_dir():
        raise FileNotFoundError(f"criteo: data_dir {data_dir} is not a directory")
    found = []
    for p in data_dir.iterdir():
        m = re.fullmatch(pattern, p.name)
        if m:
            found.append((int(m.group(1)), p))
    if not found:
        raise FileNotFoundError(
            f"criteo: {data_dir} holds no file matching {pattern.replace(chr(92), '')}"
        )
    return [p for _, p in sorted(found)]


def _dataset(
    name: str,
    sizes: Sequence[int],
    parts: list[SplitArrays],
    test_fraction: float | None,
    raw_ids: bool = False,
) -> ArrayDataset:
    """The Criteo dataset `name` of table `sizes`, split by `_split`."""
    train, test = _split(parts, test_fraction)
    return ArrayDataset(
        name=name,
        num_dense=NUM_DENSE,
        sparse_features=_features(sizes, raw_ids),
        train=train,
        test=test,
    )


def tsv_arrays(raw: RawCriteo, sizes: Sequence[int] | None) -> SplitArrays:
    """Parsed lines as SplitArrays: dense log-transformed, ids modulo ``sizes`` (None: the
    raw int64 values)."""
    if sizes is None:
        return SplitArrays(
            dense=log_transform(raw.dense),
            sparse=(IdMatrix(raw.cats.astype(np.int64)),),
            labels=raw.labels,
        )
    ids = raw.cats % np.array(sizes, dtype=np.int64)
    return SplitArrays(
        dense=log_transform(raw.dense),
        # int32 halves the memory of a parsed file; ids are below the table sizes.
        sparse=(IdMatrix(ids.astype(np.int32) if max(sizes) <= 2**31 else ids),),
        labels=raw.labels,
    )


def load_criteo_tsv(config: CriteoTsvConfig) -> ArrayDataset:
    """Parse the configured TSV files into a dataset."""
    sizes = _table_sizes("criteo-tsv", config.num_embeddings)
    modulo = None if config.raw_ids else sizes
    parts = []
    for f in config.files():
        # Converted block by block: only one block's raw int64 fields exist at a time.
        blocks = [tsv_arrays(raw, modulo) for raw in read_tsv_blocks(f)]
        parts.append(concat_arrays(blocks) if blocks else tsv_arrays(RawCriteo.concat([]), modulo))
    return _dataset("criteo-tsv", sizes, parts, config.test_fraction, config.raw_ids)


# --- criteo-npy ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CriteoNpyConfig:
    """Options of ``criteo-npy``.

    Attributes:
        data_dir: the directory of ``day_{i}_{dense,sparse,labels}.npy`` files.
        days: which days, in order (default: every day found, ascending).
        num_embeddings: rows per table; ids are taken modulo it (for files holding raw hashed
            ids). Default: read ``cardinalities.json`` (written by ``preprocess_criteo``), ids
            used as they are.
        test_fraction: see the module docstring.
    """

    data_dir: PathLike
    days: Sequence[int] | None = None
    num_embeddings: int | Sequence[int] | None = None
    test_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.num_embeddings is not None:
            object.__setattr__(
                self, "num_embeddings", _one_or_many("criteo-npy", self.num_embeddings)
            )
            _table_sizes("criteo-npy", self.num_embeddings)
        object.__setattr__(self, "days", int_list_option("criteo-npy: days", self.days))
        _check_fraction("criteo-npy", self.test_fraction)
        if self.days is not None and not list(self.days):
            raise ValueError("criteo-npy: days is empty; list at least one day or leave it out")


def npy_day_paths(data_dir: pathlib.Path, day: int) -> dict[str, pathlib.Path]:
    """The three files of ``day``: keys dense, sparse, labels."""
    return {kind: data_dir / f"day_{day}_{kind}.npy" for kind in ("dense", "sparse", "labels")}


def _load_day(data_dir: pathlib.Path, day: int) -> SplitArrays:
    paths = npy_day_paths(data_dir, day)
    for p in paths.values():
        if not p.is_file():
            raise FileNotFoundError(f"criteo-npy: {p} does not exist")
    dense = np.load(paths["dense"], mmap_mode="r")
    sparse = np.load(paths["sparse"], mmap_mode="r")
    labels = np.load(paths["labels"], mmap_mode="r")
    n = dense.shape[0]
    if dense.ndim != 2 or dense.shape[1] != NUM_DENSE:
        raise ValueError(f"criteo-npy: {paths['dense']} has shape {dense.shape}, expected (N, 13)")
    if sparse.shape != (n, NUM_SPARSE) or not np.issubdtype(sparse.dtype, np.integer):
        raise ValueError(
            f"criteo-npy: {paths['sparse']} has shape {sparse.shape} and dtype {sparse.dtype}, "
            f"expected integer ({n}, 26) to match {paths['dense'].name}"
        )
    if labels.shape not in ((n,), (n, 1)):
        raise ValueError(
            f"criteo-npy: {paths['labels']} has shape {labels.shape}, expected ({n},) or ({n}, 1)"
        )
    return SplitArrays(dense=dense, sparse=(IdMatrix(sparse),), labels=labels.reshape(n))


def read_cardinalities(data_dir: pathlib.Path) -> tuple[int, ...]:
    """``num_embeddings`` per feature from ``cardinalities.json``."""
    path = data_dir / CARDINALITIES_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"criteo-npy: {path} does not exist; write it with preprocess_criteo "
            "(shardrec preprocess-criteo) or pass num_embeddings="
        )
    sizes = json.loads(path.read_text()).get("num_embeddings")
    if not isinstance(sizes, list):
        raise ValueError(f"criteo-npy: {path} has no list 'num_embeddings'")
    return _table_sizes(f"criteo-npy ({path})", sizes)


def load_criteo_npy(config: CriteoNpyConfig) -> ArrayDataset:
    """Memory-map the configured days into a dataset."""
    data_dir = pathlib.Path(config.data_dir).expanduser()
    if config.days is None:
        files = _day_files(data_dir, r"day_(\d+)_dense\.npy")
        days = [int(p.name.split("_")[1]) for p in files]
    else:
        if not data_dir.is_dir():
            raise FileNotFoundError(f"criteo-npy: data_dir {data_dir} is not a directory")
        days = list(config.days)
    if config.num_embeddings is None:
        sizes = read_cardinalities(data_dir)
        parts = [_load_day(data_dir, d) for d in days]
    else:
        sizes = _table_sizes("criteo-npy", config.num_embeddings)
        parts = []
        for d in days:
            day = _load_day(data_dir, d)
            ids = day.sparse[0]
            assert isinstance(ids, IdMatrix)
            modulo = IdMatrix(ids.ids, modulo=sizes)
            parts.append(SplitArrays(dense=day.dense, sparse=(modulo,), labels=day.labels))
    return _dataset("criteo-npy", sizes, parts, config.test_fraction)
