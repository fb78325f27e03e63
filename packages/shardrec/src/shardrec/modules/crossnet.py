"""Cross networks (TorchRec path `torchrec.modules.crossnet`)."""

from shardrec_models import LowRankCrossNet

__all__ = ["LowRankCrossNet"]
