"""Criteo readers and binary utilities (TorchRec path `torchrec.datasets.criteo`)."""

from shardrec_data.criteo_binary import BinaryCriteoUtils
from shardrec_data.criteo_in_memory import InMemoryBinaryCriteoIterDataPipe
from shardrec_data.criteo_pipes import (
    CAT_FEATURE_COUNT,
    DAYS,
    DEFAULT_CAT_NAMES,
    DEFAULT_COLUMN_NAMES,
    DEFAULT_INT_NAMES,
    DEFAULT_LABEL_NAME,
    FREQUENCY_THRESHOLD,
    INT_FEATURE_COUNT,
    TOTAL_TRAINING_SAMPLES,
    CriteoIterDataPipe,
    criteo_kaggle,
    criteo_terabyte,
)
from shardrec_data.datapipes import PATH_MANAGER_KEY, Batch, LoadFiles, ReadLinesFromCSV, safe_cast

__all__ = [
    "CAT_FEATURE_COUNT",
    "DAYS",
    "DEFAULT_CAT_NAMES",
    "DEFAULT_COLUMN_NAMES",
    "DEFAULT_INT_NAMES",
    "DEFAULT_LABEL_NAME",
    "FREQUENCY_THRESHOLD",
    "INT_FEATURE_COUNT",
    "PATH_MANAGER_KEY",
    "TOTAL_TRAINING_SAMPLES",
    "Batch",
    "BinaryCriteoUtils",
    "CriteoIterDataPipe",
    "InMemoryBinaryCriteoIterDataPipe",
    "LoadFiles",
    "ReadLinesFromCSV",
    "criteo_kaggle",
    "criteo_terabyte",
    "safe_cast",
]
