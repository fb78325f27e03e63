"""TorchRec's `datasets.utils`: file and line pipes, train/val splits, parallel reads.

The pipes are torch's own `IterDataPipe`s (`torch.utils.data`, no torchdata), so TorchRec's
chained style works: `LoadFiles(paths) -> ReadLinesFromCSV -> .map(f) -> .limit(n)`. Files are
opened with the built-in `open` (TorchRec goes through iopath; `path_manager_key` is accepted
and only local paths are read). The umbrella module `shardrec.datasets.utils` *is* this module,
so patching `shardrec.datasets.utils.get_worker_info` reaches `ParallelReadConcat`.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import IO, Any, TypeVar

from torch.utils.data import IterDataPipe, functional_datapipe, get_worker_info

from shardrec_data.batch import Batch

__all__ = [
    "PATH_MANAGER_KEY",
    "Batch",
    "Limit",
    "LoadFiles",
    "ParallelReadConcat",
    "ReadLinesFromCSV",
    "get_worker_info",
    "idx_split_train_val",
    "rand_split_train_val",
    "safe_cast",
    "train_filter",
    "val_filter",
]

PATH_MANAGER_KEY = "torchrec"
"""TorchRec's iopath key; accepted for signature compatibility (only local files are read)."""

T = TypeVar("T")

_MODES = ("b", "t", "rb", "rt", "r")


def safe_cast(val: Any, dest_type: Callable[[Any], T], default: T) -> T:
    """`dest_type(val)`, or `default` when the conversion raises ValueError (`int("")` -> 0)."""
    try:
        return dest_type(val)
    except ValueError:
        return default


def _check_train_perc(train_perc: float) -> None:
    if not 0.0 < train_perc < 1.0:
        raise ValueError(
            f"train_perc must be in range (0.0, 1.0) (the share of samples for training), "
            f"got {train_perc!r}"
        )


def _default_key_fn(idx: int) -> int:
    return idx


def train_filter(
    key_fn: Callable[[int], int], train_perc: float, decimal_places: int, idx: int
) -> bool:
    """True when sample `idx` belongs to the train split of `idx_split_train_val`.

    The last `decimal_places` digits of `key_fn(idx)` pick the split: with 2 places and
    train_perc 0.6, keys ending in 00..59 train and 60..99 validate.
    """
    scale = int(10**decimal_places)
    return bool(key_fn(idx) % scale < round(train_perc * scale))


def val_filter(
    key_fn: Callable[[int], int], train_perc: float, decimal_places: int, idx: int
) -> bool:
    """The complement of `train_filter`."""
    return not train_filter(key_fn, train_perc, decimal_places, idx)


class _IdxFilter(IterDataPipe):  # type: ignore[type-arg]  # torch's datapipes are untyped here
    def __init__(self, datapipe: Iterable[Any], keep: Callable[[int], bool]) -> None:
        super().__init__()
        self.datapipe = datapipe
        self.keep = keep

    def __iter__(self) -> Iterator[Any]:
        for idx, item in enumerate(self.datapipe):
            if self.keep(idx):
                yield item


def idx_split_train_val(
    datapipe: Iterable[Any],
    train_perc: float,
    decimal_places: int = 2,
    key_fn: Callable[[int], int] = _default_key_fn,
) -> tuple[IterDataPipe, IterDataPipe]:  # type: ignore[type-arg]
    """Deterministic (train, val) split by sample position: see `train_filter`."""
    _check_train_perc(train_perc)
    return (
        _IdxFilter(datapipe, partial(train_filter, key_fn, train_perc, decimal_places)),
        _IdxFilter(datapipe, partial(val_filter, key_fn, train_perc, decimal_places)),
    )


class _RandFilter(IterDataPipe):  # type: ignore[type-arg]
    """Keeps items for which `keep(rng)` is true; every pass replays the same draws."""

    def __init__(
        self, datapipe: Iterable[Any], keep: Callable[[random.Random], bool], rng: random.Random
    ) -> None:
        super().__init__()
        self.datapipe = datapipe
        self.keep = keep
        self.rng = rng
        self._start = rng.getstate()

    def __iter__(self) -> Iterator[Any]:
        self.rng.setstate(self._start)
        for item in self.datapipe:
            if self.keep(self.rng):
                yield item


def _rand_train(train_perc: float, rng: random.Random) -> bool:
    return rng.random() < train_perc


def _rand_val(train_perc: float, rng: random.Random) -> bool:
    return not _rand_train(train_perc, rng)


def rand_split_train_val(
    datapipe: Iterable[Any], train_perc: float, random_seed: int = 0
) -> tuple[IterDataPipe, IterDataPipe]:  # type: ignore[type-arg]
    """Disjoint (train, val) splits by one uniform draw per sample, seeded by `random_seed`.

    Both splits draw from `random.Random(random_seed)` in the same order, so a sample goes to
    train exactly when it does not go to val; the train share is about `train_perc`.
    """
    _check_train_perc(train_perc)
    # random.Random looked up at call time: tests (and users) may substitute the generator.
    return (
        _RandFilter(datapipe, partial(_rand_train, train_perc), random.Random(random_seed)),
        _RandFilter(datapipe, partial(_rand_val, train_perc), random.Random(random_seed)),
    )


@functional_datapipe("limit")
class Limit(IterDataPipe):  # type: ignore[type-arg]
    """The first `limit` items of `datapipe` (also `any_datapipe.limit(n)`)."""

    def __init__(self, datapipe: Iterable[Any], limit: int) -> None:
        super().__init__()
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an int >= 0 (items to keep), got {limit!r}")
        self.datapipe = datapipe
        self.limit = limit

    def __iter__(self) -> Iterator[Any]:
        if self.limit == 0:
            return
        for idx, item in enumerate(self.datapipe):
            yield item
            if idx + 1 >= self.limit:
                break


class LoadFiles(IterDataPipe):  # type: ignore[type-arg]
    """`(path, open file)` for each path of `datapipe`, opened lazily in `mode`.

    mode: "b"/"rb" binary, "t"/"rt"/"r" text. `length` is what `len()` reports (-1: unknown,
    `len()` raises TypeError). `open_kw` goes to `open` (e.g. `encoding`).
    """

    def __init__(
        self,
        datapipe: Iterable[str],
        mode: str = "b",
        length: int = -1,
        path_manager_key: str = PATH_MANAGER_KEY,
        **open_kw: Any,
    ) -> None:
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"Invalid mode {mode!r}: use one of {', '.join(_MODES)}")
        self.datapipe = datapipe
        self.mode = mode if mode.startswith("r") else "r" + mode
        self.length = length
        self.path_manager_key = path_manager_key
        self.open_kw = open_kw

    def __iter__(self) -> Iterator[tuple[str, IO[Any]]]:
        for pathname in self.datapipe:
            if not isinstance(pathname, str):
                raise TypeError(f"Expected string type for pathname, but got {type(pathname)}")
            yield pathname, open(pathname, self.mode, **self.open_kw)  # noqa: SIM115 # the consumer reads it

    def __len__(self) -> int:
        if self.length == -1:
            raise TypeError("LoadFiles has no length: pass length=N when it is known")
        return self.length


class ReadLinesFromCSV(IterDataPipe):  # type: ignore[type-arg]
    """The rows (lists of str) of every file from a `LoadFiles` pipe; `kw` goes to `csv.reader`."""

    def __init__(
        self,
        datapipe: Iterable[tuple[str, IO[Any]]],
        skip_first_line: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__()
        self.datapipe = datapipe
        self.skip_first_line = skip_first_line
        self.kw = kw

    def __iter__(self) -> Iterator[list[str]]:
        for _, stream in self.datapipe:
            with stream:
                reader = csv.reader(stream, **self.kw)
                if self.skip_first_line:
                    next(reader, None)
                yield from reader


def _default_dp_selector(datapipes: Sequence[Any]) -> Sequence[Any]:
    """This DataLoader worker's share: contiguous runs, the earlier workers taking the extra one.

    Resolved through this module's `get_worker_info` (patchable, as in TorchRec).
    """
    info = get_worker_info()
    if info is None:
        return datapipes
    workers = int(info.num_workers)
    if workers > len(datapipes):
        raise ValueError(
            f"Number of workers {workers} exceeds number of datapipes ({len(datapipes)}): "
            "use at most as many DataLoader workers as datapipes"
        )
    start = 0
    for worker in range(int(info.id)):
        start += math.ceil((len(datapipes) - start) / (workers - worker))
    count = math.ceil((len(datapipes) - start) / (workers - int(info.id)))
    return datapipes[start : start + count]


class ParallelReadConcat(IterDataPipe):  # type: ignore[type-arg]
    """The items of several datapipes one after another; each DataLoader worker reads its share.

    `dp_selector(datapipes)` picks the share (default: contiguous runs per worker, all of them
    outside a worker).
    """

    def __init__(
        self,
        *datapipes: Iterable[Any],
        dp_selector: Callable[[Sequence[Any]], Sequence[Any]] = _default_dp_selector,
    ) -> None:
        super().__init__()
        self.datapipes = datapipes
        self.dp_selector = dp_selector

    def __iter__(self) -> Iterator[Any]:
        for dp in self.dp_selector(self.datapipes):
            yield from dp
