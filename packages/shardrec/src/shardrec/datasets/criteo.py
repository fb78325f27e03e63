"""Criteo readers and binary utilities (TorchRec path `torchrec.datasets.criteo`)."""

from shardrec_data import criteo_pipes as _source
from shardrec_data.criteo_binary import BinaryCriteoUtils
from shardrec_data.criteo_in_memory import InMemoryBinaryCriteoIterDataPipe
from shardrec_data.criteo_pipes import *  # noqa: F403
from shardrec_data.datapipes import PATH_MANAGER_KEY, Batch, LoadFiles, ReadLinesFromCSV, safe_cast

__all__ = [
    *_source.__all__,
    "PATH_MANAGER_KEY",
    "Batch",
    "BinaryCriteoUtils",
    "InMemoryBinaryCriteoIterDataPipe",
    "LoadFiles",
    "ReadLinesFromCSV",
    "safe_cast",
]
