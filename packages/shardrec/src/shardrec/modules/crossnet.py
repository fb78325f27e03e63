"""Cross networks (TorchRec path `torchrec.modules.crossnet`)."""

from shardrec_models import CrossNet, LowRankCrossNet, LowRankMixtureCrossNet, VectorCrossNet

__all__ = ["CrossNet", "LowRankCrossNet", "LowRankMixtureCrossNet", "VectorCrossNet"]
