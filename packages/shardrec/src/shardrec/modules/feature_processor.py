"""Feature processors (TorchRec path `torchrec.modules.feature_processor`).

TorchRec's `PositionWeightedModule` of this path takes `max_feature_lengths` and a
`dict[str, JaggedTensor]`; in shardrec's package it is `DictPositionWeightedModule`.
`PositionWeightedProcessor` weights the features of a whole KeyedJaggedTensor.
"""

from shardrec_embedding import BaseGroupedFeatureProcessor, PositionWeightedProcessor
from shardrec_embedding.dict_feature_processor import (
    BaseFeatureProcessor,
    PositionWeightedModule,
)

__all__ = [
    "BaseFeatureProcessor",
    "BaseGroupedFeatureProcessor",
    "PositionWeightedModule",
    "PositionWeightedProcessor",
]
