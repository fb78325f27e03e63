"""Keyed and combined optimizers (TorchRec path `torchrec.optim.keyed`)."""

from shardrec_optim import (
    CombinedOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
    OptimizerWrapper,
)

__all__ = ["CombinedOptimizer", "KeyedOptimizer", "KeyedOptimizerWrapper", "OptimizerWrapper"]
