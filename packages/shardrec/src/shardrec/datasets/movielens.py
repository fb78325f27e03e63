"""MovieLens 20M / 25M readers (TorchRec path `torchrec.datasets.movielens`)."""

from shardrec_data.movielens_pipes import (
    DEFAULT_COLUMN_NAMES,
    DEFAULT_MOVIES_COLUMN_NAMES,
    DEFAULT_RATINGS_COLUMN_NAMES,
    MOVIES_FILENAME,
    RATINGS_FILENAME,
    movielens_20m,
    movielens_25m,
)

__all__ = [
    "DEFAULT_COLUMN_NAMES",
    "DEFAULT_MOVIES_COLUMN_NAMES",
    "DEFAULT_RATINGS_COLUMN_NAMES",
    "MOVIES_FILENAME",
    "RATINGS_FILENAME",
    "movielens_20m",
    "movielens_25m",
]
