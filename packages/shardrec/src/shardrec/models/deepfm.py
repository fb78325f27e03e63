"""DeepFM model and its arches (TorchRec path `torchrec.models.deepfm`)."""

from shardrec_models import FMInteractionArch, SimpleDeepFMNN, SimpleDeepFMNNWrapper
from shardrec_models.deepfm_nn import DenseArch, OverArch, SparseArch

__all__ = [
    "DenseArch",
    "FMInteractionArch",
    "OverArch",
    "SimpleDeepFMNN",
    "SimpleDeepFMNNWrapper",
    "SparseArch",
]
