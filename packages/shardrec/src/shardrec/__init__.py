"""shardrec: TorchRec's concepts and names, sharded embedding tables on CPU and GPU.

`import shardrec as torchrec` runs TorchRec tutorial code. This package re-exports the component
packages' objects under TorchRec's familiar module paths; it holds no logic of its own."""

from shardrec import distributed, fx, modules, optim, sparse, streamable
from shardrec_dmp import Pipelineable
from shardrec_embedding import (
    DataType,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    PoolingType,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = [
    "DataType",
    "EmbeddingBagCollection",
    "EmbeddingBagConfig",
    "EmbeddingCollection",
    "EmbeddingConfig",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "Pipelineable",
    "PoolingType",
    "distributed",
    "fx",
    "modules",
    "optim",
    "sparse",
    "streamable",
]
