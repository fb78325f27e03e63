"""Embedding modules and building blocks (TorchRec path `torchrec.modules`)."""

from shardrec.modules import (
    activation,
    crossnet,
    deepfm,
    embedding_configs,
    embedding_modules,
    embedding_tower,
    feature_processor,
    feature_processor_,
    fp_embedding_modules,
    fused_embedding_modules,
    lazy_extension,
    mlp,
    regroup,
    utils,
)

__all__ = [
    "activation",
    "crossnet",
    "deepfm",
    "embedding_configs",
    "embedding_modules",
    "embedding_tower",
    "feature_processor",
    "feature_processor_",
    "fp_embedding_modules",
    "fused_embedding_modules",
    "lazy_extension",
    "mlp",
    "regroup",
    "utils",
]
