"""Sharding (TorchRec path `torchrec.distributed`)."""

from shardrec_dmp import DistributedModelParallel
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder

__all__ = [
    "DistributedModelParallel",
    "EmbeddingBagCollectionSharder",
    "EmbeddingCollectionSharder",
]
