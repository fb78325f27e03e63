"""Dict-of-JaggedTensor feature processors (TorchRec path `torchrec.modules.feature_processor`).

TorchRec's `PositionWeightedModule` of this path takes `max_feature_lengths` and a
`dict[str, JaggedTensor]`; in shardrec's package it is `DictPositionWeightedModule`.
"""

from shardrec_embedding.dict_feature_processor import (
    BaseFeatureProcessor,
    PositionWeightedModule,
)

__all__ = ["BaseFeatureProcessor", "PositionWeightedModule"]
