"""Quantized modules (TorchRec path `torchrec.quant`)."""

from shardrec.quant import embedding_modules, utils

__all__ = ["embedding_modules", "utils"]
