"""Sharded EmbeddingBagCollection (TorchRec path `torchrec.distributed.embeddingbag`).

TorchRec's module also imports the unsharded `EmbeddingBagCollection` (its tests import it from
here), so it is re-exported too.
"""

from shardrec_embedding import EmbeddingBagCollection
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection

__all__ = [
    "EmbeddingBagCollection",
    "EmbeddingBagCollectionSharder",
    "ShardedEmbeddingBagCollection",
]
