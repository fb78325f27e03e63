"""Optimizers (TorchRec path `torchrec.optim`)."""

from shardrec_optim import (
    CombinedOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
    OptimizerWrapper,
    WarmupOptimizer,
    WarmupPolicy,
    WarmupStage,
)

__all__ = [
    "CombinedOptimizer",
    "KeyedOptimizer",
    "KeyedOptimizerWrapper",
    "OptimizerWrapper",
    "WarmupOptimizer",
    "WarmupPolicy",
    "WarmupStage",
]
