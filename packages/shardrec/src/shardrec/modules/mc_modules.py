"""Managed-collision modules (TorchRec path `torchrec.modules.mc_modules`)."""

from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionModule,
    MCHEvictionPolicy,
    MCHEvictionPolicyMetadataInfo,
    MCHManagedCollisionModule,
    apply_mc_method_to_jt_dict,
    average_threshold_filter,
    dynamic_threshold_filter,
    probabilistic_threshold_filter,
)

__all__ = [
    "DistanceLFU_EvictionPolicy",
    "LFU_EvictionPolicy",
    "LRU_EvictionPolicy",
    "MCHEvictionPolicy",
    "MCHEvictionPolicyMetadataInfo",
    "MCHManagedCollisionModule",
    "ManagedCollisionCollection",
    "ManagedCollisionModule",
    "apply_mc_method_to_jt_dict",
    "average_threshold_filter",
    "dynamic_threshold_filter",
    "probabilistic_threshold_filter",
]
