"""DLRM and its arches (TorchRec path `torchrec.models.dlrm`)."""

from shardrec_models import (
    DLRM,
    DLRM_DCN,
    DenseArch,
    DLRM_Projection,
    DLRMTrain,
    DLRMWrapper,
    InteractionArch,
    InteractionDCNArch,
    InteractionProjectionArch,
    OverArch,
    SparseArch,
    choose,
)

__all__ = [
    "DLRM",
    "DLRM_DCN",
    "DLRMTrain",
    "DLRMWrapper",
    "DLRM_Projection",
    "DenseArch",
    "InteractionArch",
    "InteractionDCNArch",
    "InteractionProjectionArch",
    "OverArch",
    "SparseArch",
    "choose",
]
