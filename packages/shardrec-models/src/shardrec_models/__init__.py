"""DLRM, DLRM_DCN and DLRMTrain with TorchRec's semantics and state_dict names."""

from shardrec_models.activation import SwishLayerNorm
from shardrec_models.arches import (
    DenseArch,
    InteractionArch,
    InteractionDCNArch,
    InteractionProjectionArch,
    ModelConfigError,
    OverArch,
    SparseArch,
    choose,
)
from shardrec_models.crossnet import (
    CrossNet,
    LowRankCrossNet,
    LowRankMixtureCrossNet,
    VectorCrossNet,
)
from shardrec_models.deepfm import DeepFM, FactorizationMachine
from shardrec_models.deepfm_nn import FMInteractionArch, SimpleDeepFMNN, SimpleDeepFMNNWrapper
from shardrec_models.dlrm import DLRM, DLRM_DCN, DLRM_Projection, DLRMWrapper
from shardrec_models.lazy_extension import LazyModuleExtensionMixin, lazy_apply
from shardrec_models.mlp import MLP, Perceptron
from shardrec_models.train import BatchLike, DLRMTrain

__all__ = [
    "DLRM",
    "DLRM_DCN",
    "MLP",
    "BatchLike",
    "CrossNet",
    "DLRMTrain",
    "DLRMWrapper",
    "DLRM_Projection",
    "DeepFM",
    "DenseArch",
    "FMInteractionArch",
    "FactorizationMachine",
    "InteractionArch",
    "InteractionDCNArch",
    "InteractionProjectionArch",
    "LazyModuleExtensionMixin",
    "LowRankCrossNet",
    "LowRankMixtureCrossNet",
    "ModelConfigError",
    "OverArch",
    "Perceptron",
    "SimpleDeepFMNN",
    "SimpleDeepFMNNWrapper",
    "SparseArch",
    "SwishLayerNorm",
    "VectorCrossNet",
    "choose",
    "lazy_apply",
]
