"""shardrec-data: datasets yielding (dense features, KeyedJaggedTensor, labels) batches per rank."""

from shardrec_data.arrays import ArrayDataset, ConcatArrays, IdMatrix, JaggedColumn, SplitArrays
from shardrec_data.batch import Batch
from shardrec_data.criteo import (
    CARDINALITIES_FILE,
    CriteoNpyConfig,
    CriteoTsvConfig,
    load_criteo_npy,
    load_criteo_tsv,
)
from shardrec_data.criteo_binary import BinaryCriteoUtils
from shardrec_data.criteo_format import CAT_NAMES, DENSE_NAMES, RawCriteo, read_tsv
from shardrec_data.criteo_in_memory import InMemoryBinaryCriteoIterDataPipe
from shardrec_data.criteo_pipes import criteo_kaggle, criteo_terabyte
from shardrec_data.criteo_preprocess import preprocess_criteo
from shardrec_data.dataset import SPLITS, RecDataset, SparseFeature, shard_indices
from shardrec_data.movielens import MovieLensConfig, build_movielens, load_movielens
from shardrec_data.movielens_pipes import movielens_20m, movielens_25m
from shardrec_data.movielens_sources import GENRES, MovieLensTables, read_raw, read_wheel
from shardrec_data.random_rec import RandomRecDataset
from shardrec_data.registry import DATASET_NAMES, load_dataset
from shardrec_data.synthetic import SyntheticConfig, SyntheticDataset

__all__ = [
    "CARDINALITIES_FILE",
    "CAT_NAMES",
    "DATASET_NAMES",
    "DENSE_NAMES",
    "GENRES",
    "SPLITS",
    "ArrayDataset",
    "Batch",
    "BinaryCriteoUtils",
    "ConcatArrays",
    "CriteoNpyConfig",
    "CriteoTsvConfig",
    "IdMatrix",
    "InMemoryBinaryCriteoIterDataPipe",
    "JaggedColumn",
    "MovieLensConfig",
    "MovieLensTables",
    "RandomRecDataset",
    "RawCriteo",
    "RecDataset",
    "SparseFeature",
    "SplitArrays",
    "SyntheticConfig",
    "SyntheticDataset",
    "build_movielens",
    "criteo_kaggle",
    "criteo_terabyte",
    "load_criteo_npy",
    "load_criteo_tsv",
    "load_dataset",
    "load_movielens",
    "movielens_20m",
    "movielens_25m",
    "preprocess_criteo",
    "read_raw",
    "read_tsv",
    "read_wheel",
    "shard_indices",
]
