"""Planner helpers (TorchRec path `torchrec.distributed.planner.utils`)."""

from shardrec_planner.planner_utils import (
    bytes_to_gb,
    bytes_to_mb,
    find_imbalance_tables,
    gb_to_bytes,
    mb_to_bytes,
    prod,
    reset_shard_rank,
    sharder_name,
    storage_repr_in_gb,
)
from shardrec_planner.probe_search import BinarySearchPredicate, LuusJaakolaSearch
from shardrec_planner.shard_metadata import placement
from shardrec_planner.sharder_data import build_sharder_data, build_sharder_data_map

# TorchRec's private spelling, kept so TorchRec users' code that reaches for it runs.
_find_imbalance_tables = find_imbalance_tables

__all__ = [
    "BinarySearchPredicate",
    "LuusJaakolaSearch",
    "build_sharder_data",
    "build_sharder_data_map",
    "bytes_to_gb",
    "bytes_to_mb",
    "find_imbalance_tables",
    "gb_to_bytes",
    "mb_to_bytes",
    "placement",
    "prod",
    "reset_shard_rank",
    "sharder_name",
    "storage_repr_in_gb",
]
