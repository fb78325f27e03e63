"""Keyed and combined optimizers, fused-optimizer specs and row-sparse update kernels."""

from shardrec_optim.clipping import GradientClipping, GradientClippingOptimizer
from shardrec_optim.in_backward import (
    apply_optimizer_in_backward,
    fused_spec_from_optimizer,
    fused_spec_of_param,
    in_backward_optimizer_filter,
)
from shardrec_optim.keyed import (
    CombinedOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
    OptimizerFactory,
    OptimizerWrapper,
)
from shardrec_optim.rowwise_adagrad import RowWiseAdagrad
from shardrec_optim.sparse_kernels import (
    OptimState,
    coalesce_rows,
    init_state,
    sparse_update,
    state_shapes,
)
from shardrec_optim.spec import (
    NON_OPTIMIZER_FUSED_PARAMS,
    SUPPORTED_OPTIONS,
    FusedOptimSpec,
    split_fused_params,
)
from shardrec_optim.types import EmbOptimType, WeightDecayMode
from shardrec_optim.warmup import WarmupOptimizer, WarmupPolicy, WarmupStage

__all__ = [
    "NON_OPTIMIZER_FUSED_PARAMS",
    "SUPPORTED_OPTIONS",
    "CombinedOptimizer",
    "EmbOptimType",
    "FusedOptimSpec",
    "GradientClipping",
    "GradientClippingOptimizer",
    "KeyedOptimizer",
    "KeyedOptimizerWrapper",
    "OptimState",
    "OptimizerFactory",
    "OptimizerWrapper",
    "RowWiseAdagrad",
    "WarmupOptimizer",
    "WarmupPolicy",
    "WarmupStage",
    "WeightDecayMode",
    "apply_optimizer_in_backward",
    "coalesce_rows",
    "fused_spec_from_optimizer",
    "fused_spec_of_param",
    "in_backward_optimizer_filter",
    "init_state",
    "sparse_update",
    "split_fused_params",
    "state_shapes",
]
