"""Keyed and combined optimizers, fused-optimizer specs and row-sparse update kernels."""

from shardrec_optim import pooled
from shardrec_optim.clipping import GradientClipping, GradientClippingOptimizer
from shardrec_optim.diloco import AllReduceMean, DiLoCo
from shardrec_optim.fbgemm_kernels import FBGEMM_KERNEL, FbgemmUnavailableWarning
from shardrec_optim.fused_optimizer import (
    EmptyFusedOptimizer,
    FusedEmbeddingOptimizer,
    FusedOptimizer,
    FusedOptimizerModule,
)
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
from shardrec_optim.pooled import (
    TORCH_KERNEL,
    PooledGrad,
    PooledKernel,
    bag_of_id,
    bags_and_scales,
    pooled_update,
)
from shardrec_optim.rowwise_adagrad import RowWiseAdagrad
from shardrec_optim.rules import (
    BACKENDS,
    RULES,
    Backend,
    OptimState,
    StateSlot,
    UpdateRule,
    init_state,
    optimizers_on,
    state_shapes,
)
from shardrec_optim.semi_sync import SemisyncOptimizer
from shardrec_optim.sparse_kernels import coalesce_rows, sparse_update
from shardrec_optim.spec import (
    NON_OPTIMIZER_FUSED_PARAMS,
    SUPPORTED_OPTIONS,
    FusedOptimSpec,
    split_fused_params,
)
from shardrec_optim.types import EmbOptimType, WeightDecayMode
from shardrec_optim.warmup import WarmupOptimizer, WarmupPolicy, WarmupStage

__all__ = [
    "BACKENDS",
    "FBGEMM_KERNEL",
    "NON_OPTIMIZER_FUSED_PARAMS",
    "RULES",
    "SUPPORTED_OPTIONS",
    "TORCH_KERNEL",
    "AllReduceMean",
    "Backend",
    "CombinedOptimizer",
    "DiLoCo",
    "EmbOptimType",
    "EmptyFusedOptimizer",
    "FbgemmUnavailableWarning",
    "FusedEmbeddingOptimizer",
    "FusedOptimSpec",
    "FusedOptimizer",
    "FusedOptimizerModule",
    "GradientClipping",
    "GradientClippingOptimizer",
    "KeyedOptimizer",
    "KeyedOptimizerWrapper",
    "OptimState",
    "OptimizerFactory",
    "OptimizerWrapper",
    "PooledGrad",
    "PooledKernel",
    "RowWiseAdagrad",
    "SemisyncOptimizer",
    "StateSlot",
    "UpdateRule",
    "WarmupOptimizer",
    "WarmupPolicy",
    "WarmupStage",
    "WeightDecayMode",
    "apply_optimizer_in_backward",
    "bag_of_id",
    "bags_and_scales",
    "coalesce_rows",
    "fused_spec_from_optimizer",
    "fused_spec_of_param",
    "in_backward_optimizer_filter",
    "init_state",
    "optimizers_on",
    "pooled",
    "pooled_update",
    "sparse_update",
    "split_fused_params",
    "state_shapes",
]
