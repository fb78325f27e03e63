"""Experimental models (TorchRec path `torchrec.models.experimental`)."""

from shardrec.models.experimental import transformerdlrm

__all__ = ["transformerdlrm"]
