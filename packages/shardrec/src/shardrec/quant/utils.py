"""Placement helpers for quantized models (TorchRec path `torchrec.quant.utils`)."""

from shardrec_embedding.quant import meta_to_cpu_placement

__all__ = ["meta_to_cpu_placement"]
