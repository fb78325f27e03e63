"""Export IR metadata records (TorchRec path `torchrec.ir.schema`)."""

from shardrec_embedding.ir.schema import (
    EBCMetadata,
    ECMetadata,
    EmbeddingBagConfigMetadata,
    EmbeddingConfigMetadata,
    FPEBCMetadata,
    KTRegroupAsDictMetadata,
    PositionWeightedModuleCollectionMetadata,
    PositionWeightedModuleMetadata,
    QuantEBCMetadata,
    QuantECMetadata,
)

__all__ = [
    "EBCMetadata",
    "ECMetadata",
    "EmbeddingBagConfigMetadata",
    "EmbeddingConfigMetadata",
    "FPEBCMetadata",
    "KTRegroupAsDictMetadata",
    "PositionWeightedModuleCollectionMetadata",
    "PositionWeightedModuleMetadata",
    "QuantEBCMetadata",
    "QuantECMetadata",
]
