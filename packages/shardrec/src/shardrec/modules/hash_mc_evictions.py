"""HashZch eviction configs (TorchRec path `torchrec.modules.hash_mc_evictions`)."""

from shardrec_embedding.mc import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchEvictionScorer,
)

__all__ = ["HashZchEvictionConfig", "HashZchEvictionPolicyName", "HashZchEvictionScorer"]
