"""TorchRec's Criteo TSV readers: `criteo_terabyte`, `criteo_kaggle` and their constants.

Each yields one dict per line, `{"label": int, "int_0".."int_12": int, "cat_0".."cat_25": str}`
(empty integer fields read 0, categorical fields stay hexadecimal strings). A line of the Kaggle
test file has no label: fields are matched from the right, so it maps to the int/cat names only.
Inside a DataLoader worker, worker w of W reads the files whose index is w modulo W.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import IterDataPipe

from shardrec_data.datapipes import LoadFiles, ReadLinesFromCSV, safe_cast

__all__ = [
    "CAT_FEATURE_COUNT",
    "DAYS",
    "DEFAULT_CAT_NAMES",
    "DEFAULT_COLUMN_NAMES",
    "DEFAULT_INT_NAMES",
    "DEFAULT_LABEL_NAME",
    "FREQUENCY_THRESHOLD",
    "INT_FEATURE_COUNT",
    "TOTAL_TRAINING_SAMPLES",
    "CriteoIterDataPipe",
    "criteo_kaggle",
    "criteo_terabyte",
]

FREQUENCY_THRESHOLD = 3
INT_FEATURE_COUNT = 13
CAT_FEATURE_COUNT = 26
DAYS = 24
DEFAULT_LABEL_NAME = "label"
DEFAULT_INT_NAMES: list[str] = [f"int_{idx}" for idx in range(INT_FEATURE_COUNT)]
DEFAULT_CAT_NAMES: list[str] = [f"cat_{idx}" for idx in range(CAT_FEATURE_COUNT)]
DEFAULT_COLUMN_NAMES: list[str] = [DEFAULT_LABEL_NAME, *DEFAULT_INT_NAMES, *DEFAULT_CAT_NAMES]
TOTAL_TRAINING_SAMPLES = 4195197692
"""Rows of the Criteo 1TB days 0-22 (day 23 is split into validation and test)."""

_INTS = 1 + INT_FEATURE_COUNT  # label and integer columns come first


def _default_row_mapper(example: list[str]) -> dict[str, int | str]:
    if len(example) > len(DEFAULT_COLUMN_NAMES):
        raise ValueError(
            f"a Criteo line has at most {len(DEFAULT_COLUMN_NAMES)} tab-separated fields, "
            f"got {len(example)}: {example[:3]}..."
        )
    first = len(DEFAULT_COLUMN_NAMES) - len(example)
    row: dict[str, int | str] = {}
    for col, val in enumerate(example, start=first):
        name = DEFAULT_COLUMN_NAMES[col]
        row[name] = safe_cast(val, int, 0) if col < _INTS else str(val)
    return row


class CriteoIterDataPipe(IterDataPipe):  # type: ignore[type-arg]  # torch's pipes are untyped
    """Streams Criteo TSV files (1TB click logs or Kaggle), one mapped row per line.

    paths: the TSV files; row_mapper: applied to each line's list of fields (None: the raw
    list); open_kw: passed to `open`.
    """

    def __init__(
        self,
        paths: Iterable[str],
        *,
        row_mapper: Callable[[list[str]], Any] | None = _default_row_mapper,
        **open_kw: Any,
    ) -> None:
        super().__init__()
        self.paths = paths
        self.row_mapper = row_mapper
        self.open_kw = open_kw

    def __iter__(self) -> Iterator[Any]:
        paths = list(self.paths)
        info = torch.utils.data.get_worker_info()
        if info is not None:
            paths = [p for i, p in enumerate(paths) if i % info.num_workers == info.id]
        lines = ReadLinesFromCSV(LoadFiles(paths, mode="r", **self.open_kw), delimiter="\t")
        mapper = self.row_mapper
        for line in lines:
            yield line if mapper is None else mapper(line)


def criteo_terabyte(
    paths: Iterable[str],
    *,
    row_mapper: Callable[[list[str]], Any] | None = _default_row_mapper,
    **open_kw: Any,
) -> IterDataPipe:  # type: ignore[type-arg]
    """The Criteo 1TB Click Logs from its day TSV files (see `CriteoIterDataPipe`)."""
    return CriteoIterDataPipe(paths, row_mapper=row_mapper, **open_kw)


def criteo_kaggle(
    path: str,
    *,
    row_mapper: Callable[[list[str]], Any] | None = _default_row_mapper,
    **open_kw: Any,
) -> IterDataPipe:  # type: ignore[type-arg]
    """The Kaggle Display Advertising train or test TSV file (see `CriteoIterDataPipe`)."""
    return CriteoIterDataPipe((path,), row_mapper=row_mapper, **open_kw)
