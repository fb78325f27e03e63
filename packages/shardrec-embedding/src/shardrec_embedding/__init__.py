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
from shardrec_embedding.dynamic import (
    AdmissionPolicy,
    DynamicTableConfig,
    EvictionPolicy,
    UnknownIdPolicy,
    dynamic_table_stats,
)
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.embedding_tower import (
    EmbeddingTower,
    EmbeddingTowerCollection,
    tower_input_params,
)
from shardrec_embedding.feature_processors import (
    BaseGroupedFeatureProcessor,
    FeatureProcessedEmbeddingBagCollection,
    FeatureProcessor,
    FeatureProcessorDictWrapper,
    FeatureProcessorsCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
    PositionWeightedProcessor,
)
from shardrec_embedding.fused import (
    BatchedFusedEmbeddingBag,
    FusedEmbeddingBagCollection,
    FusedTableSpec,
)
from shardrec_embedding.module_utils import construct_jagged_tensors, deterministic_dedup
from shardrec_embedding.quant import (
    QuantConfig,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
    quantize_inference_model,
)
from shardrec_embedding.regroup import (
    CacheMixin,
    KTRegroupAsDict,
    PermuteMultiEmbedding,
    module_init,
)

__all__ = [
    "AdmissionPolicy",
    "BaseEmbeddingConfig",
    "BaseGroupedFeatureProcessor",
    "BatchedFusedEmbeddingBag",
    "CacheMixin",
    "DataType",
    "DynamicTableConfig",
    "EmbeddingBagCollection",
    "EmbeddingBagConfig",
    "EmbeddingCollection",
    "EmbeddingConfig",
    "EmbeddingTower",
    "EmbeddingTowerCollection",
    "EvictionPolicy",
    "FeatureProcessedEmbeddingBagCollection",
    "FeatureProcessor",
    "FeatureProcessorDictWrapper",
    "FeatureProcessorsCollection",
    "FusedEmbeddingBagCollection",
    "FusedTableSpec",
    "GradWorkspace",
    "KTRegroupAsDict",
    "PermuteMultiEmbedding",
    "PoolingType",
    "PositionWeightedModule",
    "PositionWeightedModuleCollection",
    "PositionWeightedProcessor",
    "QuantConfig",
    "QuantEmbeddingBagCollection",
    "QuantEmbeddingCollection",
    "UnknownIdPolicy",
    "allocate_packed",
    "batched_embedding",
    "batched_embedding_bag",
    "construct_jagged_tensors",
    "data_type_to_dtype",
    "deterministic_dedup",
    "dtype_to_data_type",
    "dynamic_table_stats",
    "module_init",
    "packed_weight",
    "quantize_inference_model",
    "repack_",
    "shift_ids",
    "tower_input_params",
]
