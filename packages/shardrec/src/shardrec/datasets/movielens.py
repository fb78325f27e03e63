"""MovieLens 20M / 25M readers (TorchRec path `torchrec.datasets.movielens`)."""

from shardrec_data import movielens_pipes as _source
from shardrec_data.movielens_pipes import *  # noqa: F403

__all__ = list(_source.__all__)
