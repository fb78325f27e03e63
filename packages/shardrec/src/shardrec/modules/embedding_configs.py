"""Table configs (TorchRec path `torchrec.modules.embedding_configs`)."""

from shardrec_embedding import QuantConfig
from shardrec_embedding import configs as _source
from shardrec_embedding.configs import *  # noqa: F403
from shardrec_embedding.virtual import (
    CountBasedEvictionPolicy,
    CountTimestampMixedEvictionPolicy,
    FeatureL2NormBasedEvictionPolicy,
    FeatureScoreBasedEvictionPolicy,
    FeatureScoreMapping,
    NoEvictionPolicy,
    TimestampBasedEvictionPolicy,
    VirtualTableEvictionPolicy,
)

# TorchRec's names only: `module_dtype` is shardrec's own helper (shardrec_embedding.configs).
__all__ = [*(n for n in _source.__all__ if n != "module_dtype"), "QuantConfig"]
# TorchRec's virtual-table eviction policies (shardrec_embedding.virtual).
__all__ += [
    "CountBasedEvictionPolicy",
    "CountTimestampMixedEvictionPolicy",
    "FeatureL2NormBasedEvictionPolicy",
    "FeatureScoreBasedEvictionPolicy",
    "FeatureScoreMapping",
    "NoEvictionPolicy",
    "TimestampBasedEvictionPolicy",
    "VirtualTableEvictionPolicy",
]
