"""DLRM with a transformer-encoder interaction (TorchRec path
`torchrec.models.experimental.transformerdlrm`)."""

from shardrec_models.arches import InteractionTransformerArch
from shardrec_models.dlrm import DLRM_Transformer

__all__ = ["DLRM_Transformer", "InteractionTransformerArch"]
