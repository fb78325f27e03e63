"""Optimizer helpers (TorchRec path `torchrec.optim.optimizers`)."""

from shardrec_optim import in_backward_optimizer_filter

__all__ = ["in_backward_optimizer_filter"]
