"""Recommendation models (TorchRec path `torchrec.models`)."""

from shardrec.models import dlrm

__all__ = ["dlrm"]
