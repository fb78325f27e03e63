"""TorchRec's MovieLens 20M / 25M readers: one dict per rating line of `ratings.csv`.

`{"userId": int, "movieId": int, "rating": float, "timestamp": int}`, and with
`include_movies_data=True` also the movie's `"title"` and `"genres"` (str) from `movies.csv`.
Unparsable numbers read as 0 (TorchRec's `safe_cast`). For the MovieLens-100k training data
of `shardrec-data` itself see `movielens.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import IterDataPipe

from shardrec_data.datapipes import LoadFiles, ReadLinesFromCSV, safe_cast

__all__ = [
    "DEFAULT_COLUMN_NAMES",
    "DEFAULT_MOVIES_COLUMN_NAMES",
    "DEFAULT_RATINGS_COLUMN_NAMES",
    "MOVIES_FILENAME",
    "RATINGS_FILENAME",
    "movielens_20m",
    "movielens_25m",
]

RATINGS_FILENAME = "ratings.csv"
MOVIES_FILENAME = "movies.csv"
DEFAULT_RATINGS_COLUMN_NAMES: list[str] = ["userId", "movieId", "rating", "timestamp"]
DEFAULT_MOVIES_COLUMN_NAMES: list[str] = ["movieId", "title", "genres"]
DEFAULT_COLUMN_NAMES: list[str] = DEFAULT_RATINGS_COLUMN_NAMES + DEFAULT_MOVIES_COLUMN_NAMES[1:]
_TYPES: list[tuple[type, Any]] = [(int, 0), (int, 0), (float, 0.0), (int, 0), (str, ""), (str, "")]


def _default_row_mapper(example: list[str]) -> dict[str, float | int | str]:
    return {DEFAULT_COLUMN_NAMES[i]: safe_cast(val, *_TYPES[i]) for i, val in enumerate(example)}


@dataclass(eq=False, repr=False)  # IterDataPipe's own repr and identity equality
class _MovieLensPipe(IterDataPipe):  # type: ignore[type-arg]  # torch's pipes are untyped
    root: str
    include_movies_data: bool
    row_mapper: Callable[[list[str]], Any] | None
    open_kw: dict[str, Any]

    def _lines(self, filename: str) -> Iterable[list[str]]:
        files = LoadFiles((os.path.join(self.root, filename),), mode="r", **self.open_kw)
        return ReadLinesFromCSV(files, skip_first_line=True, delimiter=",")

    def __iter__(self) -> Iterator[Any]:
        movies: dict[str, list[str]] = {}
        if self.include_movies_data:
            movies = {row[0]: row[1:] for row in self._lines(MOVIES_FILENAME)}
        for row in self._lines(RATINGS_FILENAME):
            if self.include_movies_data:
                if row[1] not in movies:
                    raise ValueError(
                        f"{RATINGS_FILENAME} rates movieId {row[1]!r}, which {MOVIES_FILENAME} "
                        f"in {self.root} does not list"
                    )
                row = row + movies[row[1]]
            yield row if self.row_mapper is None else self.row_mapper(row)


def movielens_20m(
    root: str,
    *,
    include_movies_data: bool = False,
    row_mapper: Callable[[list[str]], Any] | None = _default_row_mapper,
    **open_kw: Any,
) -> IterDataPipe:  # type: ignore[type-arg]
    """MovieLens 20M or 25M from the directory `root` holding `ratings.csv` (and `movies.csv`).

    `movielens_25m` is this same reader: the two releases share the file layout.
    """
    return _MovieLensPipe(root, include_movies_data, row_mapper, open_kw)


movielens_25m = movielens_20m
