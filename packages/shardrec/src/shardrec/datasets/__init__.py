"""Datasets of (dense, KeyedJaggedTensor, labels) batches (TorchRec path `torchrec.datasets`)."""

from shardrec.datasets import criteo, movielens, random, utils
from shardrec_data import (
    DATASET_NAMES,
    SPLITS,
    ArrayDataset,
    Batch,
    RecDataset,
    SparseFeature,
    SyntheticConfig,
    SyntheticDataset,
    load_dataset,
    shard_indices,
)

__all__ = [
    "DATASET_NAMES",
    "SPLITS",
    "ArrayDataset",
    "Batch",
    "RecDataset",
    "SparseFeature",
    "SyntheticConfig",
    "SyntheticDataset",
    "criteo",
    "load_dataset",
    "movielens",
    "random",
    "shard_indices",
    "utils",
]
