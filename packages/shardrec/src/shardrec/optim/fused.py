"""TorchRec path `torchrec.optim.fused`: optimizers that update in backward."""

from shardrec_optim import EmptyFusedOptimizer, FusedOptimizer, FusedOptimizerModule

__all__ = ["EmptyFusedOptimizer", "FusedOptimizer", "FusedOptimizerModule"]
