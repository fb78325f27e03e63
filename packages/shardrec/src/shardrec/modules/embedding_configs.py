"""Table configs (TorchRec path `torchrec.modules.embedding_configs`)."""

from shardrec_embedding import (
    BaseEmbeddingConfig,
    DataType,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType,
    QuantConfig,
    data_type_to_dtype,
    dtype_to_data_type,
)

__all__ = [
    "BaseEmbeddingConfig",
    "DataType",
    "EmbeddingBagConfig",
    "EmbeddingConfig",
    "PoolingType",
    "QuantConfig",
    "data_type_to_dtype",
    "dtype_to_data_type",
]
