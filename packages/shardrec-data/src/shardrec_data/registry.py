"""``load_dataset(name, **options)``: one entry point that looks up a dataset by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from shardrec_data.criteo import CriteoNpyConfig, CriteoTsvConfig, load_criteo_npy, load_criteo_tsv
from shardrec_data.dataset import RecDataset
from shardrec_data.movielens import MovieLensConfig, load_movielens
from shardrec_data.synthetic import SyntheticConfig, SyntheticDataset

__all__ = ["DATASET_NAMES", "load_dataset"]

C = TypeVar("C")


def _synthetic(options: dict[str, object]) -> RecDataset:
    return SyntheticDataset(_config(SyntheticConfig, "synthetic", options))


def _movielens(options: dict[str, object]) -> RecDataset:
    return load_movielens(_config(MovieLensConfig, "movielens-100k", options))


def _criteo_tsv(options: dict[str, object]) -> RecDataset:
    return load_criteo_tsv(_config(CriteoTsvConfig, "criteo-tsv", options))


def _criteo_npy(options: dict[str, object]) -> RecDataset:
    if "data_dir" not in options:
        raise ValueError(
            "dataset 'criteo-npy' needs data_dir= (a directory of day_<i>_*.npy files)"
        )
    return load_criteo_npy(_config(CriteoNpyConfig, "criteo-npy", options))


_LOADERS: dict[str, Callable[[dict[str, object]], RecDataset]] = {
    "movielens-100k": _movielens,
    "criteo-tsv": _criteo_tsv,
    "criteo-npy": _criteo_npy,
    "synthetic": _synthetic,
}

DATASET_NAMES: tuple[str, ...] = tuple(_LOADERS)


def _config(cls: type[C], name: str, options: dict[str, object]) -> C:
    """``cls(**options)``, turning an unknown option into a ValueError that lists the valid ones."""
    valid = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]  # cls is a dataclass
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"dataset {name!r} has no option {', '.join(map(repr, unknown))}; "
            f"valid options: {', '.join(valid)}"
        )
    return cls(**options)


def load_dataset(name: str, **options: object) -> RecDataset:
    """The dataset ``name`` (one of ``DATASET_NAMES``) built with ``options``.

    Options are each dataset's config fields (docs/data.md). Raises ValueError for an unknown
    name or option or a bad value, FileNotFoundError for a missing file or directory: both
    before any batch is read, so a launcher can report them in one line.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASET_NAMES)}")
    return _LOADERS[name](dict(options))
