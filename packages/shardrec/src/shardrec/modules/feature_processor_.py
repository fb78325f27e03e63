"""Feature processors (TorchRec path `torchrec.modules.feature_processor_`)."""

from shardrec_embedding import PositionWeightedModule, PositionWeightedModuleCollection

__all__ = ["PositionWeightedModule", "PositionWeightedModuleCollection"]
