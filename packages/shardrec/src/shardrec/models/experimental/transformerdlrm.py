"""DLRM with a transformer-encoder interaction (TorchRec path
`torchrec.models.experimental.transformerdlrm`)."""

from shardrec_models.transformer_dlrm import DLRM_Transformer, InteractionTransformerArch

__all__ = ["DLRM_Transformer", "InteractionTransformerArch"]
