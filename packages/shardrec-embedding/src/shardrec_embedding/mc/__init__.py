"""Managed-collision modules: raw ids -> rows, TorchRec's `mc_modules` family."""

from shardrec_embedding.mc.adapter import (
    McEmbeddingBagCollectionAdapter,
    McEmbeddingCollectionAdapter,
)
from shardrec_embedding.mc.base import ManagedCollisionModule, apply_mc_method_to_jt_dict
from shardrec_embedding.mc.collection import ManagedCollisionCollection
from shardrec_embedding.mc.embedding_modules import (
    BaseManagedCollisionEmbeddingCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
)
from shardrec_embedding.mc.filters import (
    average_threshold_filter,
    dynamic_threshold_filter,
    probabilistic_threshold_filter,
)
from shardrec_embedding.mc.hash_evictions import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchEvictionScorer,
    HashZchPerFeatureTtlScorer,
    HashZchSingleTtlScorer,
    get_eviction_scorer,
)
from shardrec_embedding.mc.hash_metrics import ScalarLogger
from shardrec_embedding.mc.hash_zch import HashZchManagedCollisionModule, HashZchStats
from shardrec_embedding.mc.mch import MCHManagedCollisionModule, MCHStats
from shardrec_embedding.mc.policies import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    MCHEvictionPolicy,
    MCHEvictionPolicyMetadataInfo,
)

__all__ = [
    "BaseManagedCollisionEmbeddingCollection",
    "DistanceLFU_EvictionPolicy",
    "HashZchEvictionConfig",
    "HashZchEvictionPolicyName",
    "HashZchEvictionScorer",
    "HashZchManagedCollisionModule",
    "HashZchPerFeatureTtlScorer",
    "HashZchSingleTtlScorer",
    "HashZchStats",
    "LFU_EvictionPolicy",
    "LRU_EvictionPolicy",
    "MCHEvictionPolicy",
    "MCHEvictionPolicyMetadataInfo",
    "MCHManagedCollisionModule",
    "MCHStats",
    "ManagedCollisionCollection",
    "ManagedCollisionEmbeddingBagCollection",
    "ManagedCollisionEmbeddingCollection",
    "ManagedCollisionModule",
    "McEmbeddingBagCollectionAdapter",
    "McEmbeddingCollectionAdapter",
    "ScalarLogger",
    "apply_mc_method_to_jt_dict",
    "average_threshold_filter",
    "dynamic_threshold_filter",
    "get_eviction_scorer",
    "probabilistic_threshold_filter",
]
