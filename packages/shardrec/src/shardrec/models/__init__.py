"""Recommendation models (TorchRec path `torchrec.models`)."""

from shardrec.models import deepfm, dlrm

__all__ = ["deepfm", "dlrm"]
