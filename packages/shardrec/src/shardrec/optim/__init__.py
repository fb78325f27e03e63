"""Optimizers (TorchRec path `torchrec.optim`)."""

from shardrec.optim import (
    apply_optimizer_in_backward,
    clipping,
    fused,
    keyed,
    optimizers,
    rowwise_adagrad,
    semi_sync,
    warmup,
)
from shardrec_optim import (
    CombinedOptimizer,
    GradientClipping,
    GradientClippingOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
    OptimizerWrapper,
    RowWiseAdagrad,
    SemisyncOptimizer,
    WarmupOptimizer,
    WarmupPolicy,
    WarmupStage,
)

__all__ = [
    "CombinedOptimizer",
    "GradientClipping",
    "GradientClippingOptimizer",
    "KeyedOptimizer",
    "KeyedOptimizerWrapper",
    "OptimizerWrapper",
    "RowWiseAdagrad",
    "SemisyncOptimizer",
    "WarmupOptimizer",
    "WarmupPolicy",
    "WarmupStage",
    "apply_optimizer_in_backward",
    "clipping",
    "fused",
    "keyed",
    "optimizers",
    "rowwise_adagrad",
    "semi_sync",
    "warmup",
]
