"""Gradient clipping (TorchRec path `torchrec.optim.clipping`)."""

from shardrec_optim import GradientClipping, GradientClippingOptimizer

__all__ = ["GradientClipping", "GradientClippingOptimizer"]
