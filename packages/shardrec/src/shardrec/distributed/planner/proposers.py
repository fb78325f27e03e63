"""TorchRec's proposers (TorchRec path `torchrec.distributed.planner.proposers`)."""

from shardrec_planner.offload_scaleup import EmbeddingOffloadScaleupProposer
from shardrec_planner.proposers import (
    DynamicProgrammingProposer,
    GreedyProposer,
    GridSearchProposer,
    Proposer,
    UniformProposer,
    _sharding_option_score,
    logger,  # noqa: F401  (TorchRec's tests patch it here; not exported)
    proposers_to_proposals_list,
)

__all__ = [
    "DynamicProgrammingProposer",
    "EmbeddingOffloadScaleupProposer",
    "GreedyProposer",
    "GridSearchProposer",
    "Proposer",
    "UniformProposer",
    "_sharding_option_score",
    "proposers_to_proposals_list",
]
