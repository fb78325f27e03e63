"""Activations (TorchRec path `torchrec.modules.activation`)."""

from shardrec_models import SwishLayerNorm

__all__ = ["SwishLayerNorm"]
