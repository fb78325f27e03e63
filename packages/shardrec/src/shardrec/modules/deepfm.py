"""DeepFM parts (TorchRec path `torchrec.modules.deepfm`)."""

from shardrec_models import DeepFM, FactorizationMachine

__all__ = ["DeepFM", "FactorizationMachine"]
