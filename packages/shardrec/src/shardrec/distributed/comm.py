"""Launcher facts and per-host process groups (TorchRec path `torchrec.distributed.comm`)."""

from torch import distributed as dist

from shardrec_collectives import comm as _source
from shardrec_collectives.comm import *  # noqa: F403

__all__ = list(_source.__all__)

# TorchRec caches the groups of `intra_and_cross_node_pg` in these module globals and its test
# teardown destroys them when set; shardrec returns new groups on every call and caches none,
# so they stay None (nothing cached to destroy).
_INTRA_PG: dist.ProcessGroup | None = None
_CROSS_PG: dist.ProcessGroup | None = None
