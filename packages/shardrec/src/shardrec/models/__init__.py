"""Recommendation models (TorchRec path `torchrec.models`)."""

from shardrec.models import deepfm, dlrm, experimental

__all__ = ["deepfm", "dlrm", "experimental"]
