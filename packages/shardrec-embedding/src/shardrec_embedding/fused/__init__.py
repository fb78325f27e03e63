"""Fused (optimizer-in-backward) embedding-bag lookups."""

from shardrec_embedding.fused.batched import BatchedFusedEmbeddingBag, FusedTable, OptimizerArg
from shardrec_embedding.fused.collection import (
    CollectionFusedOptimizer,
    FusedEmbeddingBagCollection,
    OptimizerType,
    resolve_optimizer,
)
from shardrec_embedding.fused.convert import fuse_embedding_optimizer
from shardrec_embedding.fused.lookup import KERNELS, Backend, FusedLookupFunction, fused_update
from shardrec_embedding.fused.segments import (
    GradientPieces,
    SegmentRead,
    gradient_pieces,
    segment_lookup,
    segment_lookup_unsupported,
)
from shardrec_embedding.fused.tables import FusedTableSpec

__all__ = [
    "KERNELS",
    "Backend",
    "BatchedFusedEmbeddingBag",
    "CollectionFusedOptimizer",
    "FusedEmbeddingBagCollection",
    "FusedLookupFunction",
    "FusedTable",
    "FusedTableSpec",
    "GradientPieces",
    "OptimizerArg",
    "OptimizerType",
    "SegmentRead",
    "fuse_embedding_optimizer",
    "fused_update",
    "gradient_pieces",
    "resolve_optimizer",
    "segment_lookup",
    "segment_lookup_unsupported",
]
