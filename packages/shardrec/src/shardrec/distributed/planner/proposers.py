"""TorchRec's proposers (TorchRec path `torchrec.distributed.planner.proposers`)."""

from shardrec_planner.proposers import (
    DynamicProgrammingProposer,
    GreedyProposer,
    GridSearchProposer,
    Proposer,
    UniformProposer,
    _sharding_option_score,
    logger,
    proposers_to_proposals_list,
)

__all__ = [
    "DynamicProgrammingProposer",
    "GreedyProposer",
    "GridSearchProposer",
    "Proposer",
    "UniformProposer",
    "_sharding_option_score",
    "logger",
    "proposers_to_proposals_list",
]
