"""DLRM, DLRM_DCN and DLRMTrain with TorchRec's semantics and state_dict names."""

from shardrec_models.arches import (
    DenseArch,
    InteractionArch,
    InteractionDCNArch,
    OverArch,
    SparseArch,
)
from shardrec_models.crossnet import (
    CrossNet,
    LowRankCrossNet,
    LowRankMixtureCrossNet,
    VectorCrossNet,
)
from shardrec_models.dlrm import DLRM, DLRM_DCN
from shardrec_models.mlp import MLP, Perceptron
from shardrec_models.train import BatchLike, DLRMTrain

__all__ = [
    "DLRM",
    "DLRM_DCN",
    "MLP",
    "BatchLike",
    "CrossNet",
    "DLRMTrain",
    "DenseArch",
    "InteractionArch",
    "InteractionDCNArch",
    "LowRankCrossNet",
    "LowRankMixtureCrossNet",
    "OverArch",
    "Perceptron",
    "SparseArch",
    "VectorCrossNet",
]
