"""Quantized modules (TorchRec path `torchrec.quant`)."""

from shardrec.quant import embedding_modules

__all__ = ["embedding_modules"]
