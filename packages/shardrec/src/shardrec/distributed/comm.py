"""Launcher facts and per-host process groups (TorchRec path `torchrec.distributed.comm`)."""

from shardrec_collectives import comm as _source
from shardrec_collectives.comm import *  # noqa: F403

__all__ = list(_source.__all__)
