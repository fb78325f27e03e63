"""DLRM and its arches (TorchRec path `torchrec.models.dlrm`)."""

from shardrec_models import (
    DLRM,
    DLRM_DCN,
    DenseArch,
    DLRMTrain,
    InteractionArch,
    InteractionDCNArch,
    OverArch,
    SparseArch,
)

__all__ = [
    "DLRM",
    "DLRM_DCN",
    "DLRMTrain",
    "DenseArch",
    "InteractionArch",
    "InteractionDCNArch",
    "OverArch",
    "SparseArch",
]
