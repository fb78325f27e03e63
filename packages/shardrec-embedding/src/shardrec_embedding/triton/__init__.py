"""Triton kernels for CUDA lookups (optional: without Triton the torch-native path runs)."""

from shardrec_embedding.triton._loader import (
    TritonUnavailableWarning,
    interpreting,
    triton_available,
)
from shardrec_embedding.triton.ops import (
    MAX_DIM,
    PREFER_TRITON,
    backward_applies,
    backward_unsupported,
    forward_applies,
    pooled_embedding_bag,
    rowwise_adagrad_update,
)

__all__ = [
    "MAX_DIM",
    "PREFER_TRITON",
    "TritonUnavailableWarning",
    "backward_applies",
    "backward_unsupported",
    "forward_applies",
    "interpreting",
    "pooled_embedding_bag",
    "rowwise_adagrad_update",
    "triton_available",
]
