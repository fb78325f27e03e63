"""Feature processors (TorchRec path `torchrec.modules.feature_processor_`)."""

from shardrec_embedding import (
    FeatureProcessor,
    FeatureProcessorsCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)

__all__ = [
    "FeatureProcessor",
    "FeatureProcessorsCollection",
    "PositionWeightedModule",
    "PositionWeightedModuleCollection",
]
