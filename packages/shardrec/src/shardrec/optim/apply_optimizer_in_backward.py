"""Optimizer-in-backward intent (TorchRec path `torchrec.optim.apply_optimizer_in_backward`)."""

from shardrec_optim import apply_optimizer_in_backward

__all__ = ["apply_optimizer_in_backward"]
