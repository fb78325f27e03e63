"""Warmup schedules (TorchRec path `torchrec.optim.warmup`)."""

from shardrec_optim import WarmupOptimizer, WarmupPolicy, WarmupStage

__all__ = ["WarmupOptimizer", "WarmupPolicy", "WarmupStage"]
