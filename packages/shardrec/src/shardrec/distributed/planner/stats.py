"""Plan statistics (TorchRec path `torchrec.distributed.planner.stats`).

TorchRec's imbalance measures are here under our names and TorchRec's private spellings.
"""

from shardrec_planner.embedding_stats import EmbeddingStats, NoopEmbeddingStats
from shardrec_planner.imbalance import (
    chi_sq_divergence,
    kl_divergence,
    max_chi_sq_divergence,
    max_kl_divergence,
    normalize,
    total_distance,
    total_variation,
)

# TorchRec's private spellings, which TorchRec users' code reaches for.
_normalize_float = normalize
_normalize_int = normalize
_total_variation = total_variation
_total_distance = total_distance
_chi_sq_divergence = chi_sq_divergence
_kl_divergence = kl_divergence
_calc_max_chi_sq_divergence = max_chi_sq_divergence
_calc_max_kl_divergence = max_kl_divergence

__all__ = [
    "EmbeddingStats",
    "NoopEmbeddingStats",
    "chi_sq_divergence",
    "kl_divergence",
    "max_chi_sq_divergence",
    "max_kl_divergence",
    "normalize",
    "total_distance",
    "total_variation",
]
