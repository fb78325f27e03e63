"""Inference helpers (TorchRec path `torchrec.inference`)."""

from shardrec.inference import modules

__all__ = ["modules"]
