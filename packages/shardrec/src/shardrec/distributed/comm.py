"""Launcher facts and per-host process groups (TorchRec path `torchrec.distributed.comm`)."""

from shardrec_collectives import (
    get_group_rank,
    get_local_rank,
    get_local_size,
    get_num_groups,
    intra_and_cross_node_pg,
)

__all__ = [
    "get_group_rank",
    "get_local_rank",
    "get_local_size",
    "get_num_groups",
    "intra_and_cross_node_pg",
]
