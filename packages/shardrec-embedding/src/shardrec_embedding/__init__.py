"""Embedding table configs, EmbeddingBagCollection, EmbeddingCollection, table-batched lookups."""

from shardrec_embedding.batched_lookup import (
    GradWorkspace,
    allocate_packed,
    batched_embedding,
    batched_embedding_bag,
    packed_weight,
    repack_,
    shift_ids,
)
from shardrec_embedding.configs import (
    BaseEmbeddingConfig,
    DataType,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType,
    data_type_to_dtype,
    dtype_to_data_type,
)
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.feature_processors import (
    FeatureProcessedEmbeddingBagCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_embedding.fused import (
    BatchedFusedEmbeddingBag,
    FusedEmbeddingBagCollection,
    FusedTableSpec,
)
from shardrec_embedding.quant import (
    QuantConfig,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
    quantize_inference_model,
)

__all__ = [
    "BaseEmbeddingConfig",
    "BatchedFusedEmbeddingBag",
    "DataType",
    "EmbeddingBagCollection",
    "EmbeddingBagConfig",
    "EmbeddingCollection",
    "EmbeddingConfig",
    "FeatureProcessedEmbeddingBagCollection",
    "FusedEmbeddingBagCollection",
    "FusedTableSpec",
    "GradWorkspace",
    "PoolingType",
    "PositionWeightedModule",
    "PositionWeightedModuleCollection",
    "QuantConfig",
    "QuantEmbeddingBagCollection",
    "QuantEmbeddingCollection",
    "allocate_packed",
    "batched_embedding",
    "batched_embedding_bag",
    "data_type_to_dtype",
    "dtype_to_data_type",
    "packed_weight",
    "quantize_inference_model",
    "repack_",
    "shift_ids",
]
