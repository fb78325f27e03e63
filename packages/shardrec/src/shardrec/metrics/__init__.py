"""Metrics exact across ranks (TorchRec path `torchrec.metrics`)."""

import shardrec_metrics as _source
from shardrec_metrics import *  # noqa: F403

__all__ = list(_source.__all__)
