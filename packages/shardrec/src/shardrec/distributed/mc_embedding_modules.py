"""Base sharder of the MC embedding collections (TorchRec path
`torchrec.distributed.mc_embedding_modules`)."""

from shardrec_sharding.mc import BaseManagedCollisionEmbeddingCollectionSharder

__all__ = ["BaseManagedCollisionEmbeddingCollectionSharder"]
