"""Communication modules (TorchRec path `torchrec.distributed.dist_data`)."""

from shardrec_collectives import (
    EmbeddingsAllToOne,
    EmbeddingsAllToOneReduce,
    KJTAllToAll,
    KJTAllToAllSplitsAwaitable,
    KJTOneToAll,
    PooledEmbeddingsAllGather,
    PooledEmbeddingsAllToAll,
    PooledEmbeddingsAwaitable,
    PooledEmbeddingsReduceScatter,
    SeqEmbeddingsAllToOne,
    SequenceEmbeddingsAllToAll,
    SequenceEmbeddingsAwaitable,
    VariableBatchPooledEmbeddingsAllToAll,
    VariableBatchPooledEmbeddingsReduceScatter,
)

__all__ = [
    "EmbeddingsAllToOne",
    "EmbeddingsAllToOneReduce",
    "KJTAllToAll",
    "KJTAllToAllSplitsAwaitable",
    "KJTOneToAll",
    "PooledEmbeddingsAllGather",
    "PooledEmbeddingsAllToAll",
    "PooledEmbeddingsAwaitable",
    "PooledEmbeddingsReduceScatter",
    "SeqEmbeddingsAllToOne",
    "SequenceEmbeddingsAllToAll",
    "SequenceEmbeddingsAwaitable",
    "VariableBatchPooledEmbeddingsAllToAll",
    "VariableBatchPooledEmbeddingsReduceScatter",
]
