"""HashZch eviction configs and scorers (TorchRec path `torchrec.modules.hash_mc_evictions`)."""

from shardrec_embedding.mc import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchEvictionScorer,
    HashZchPerFeatureTtlScorer,
    HashZchSingleTtlScorer,
    get_eviction_scorer,
)

__all__ = [
    "HashZchEvictionConfig",
    "HashZchEvictionPolicyName",
    "HashZchEvictionScorer",
    "HashZchPerFeatureTtlScorer",
    "HashZchSingleTtlScorer",
    "get_eviction_scorer",
]
