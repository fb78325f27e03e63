"""TorchRec's proposers (TorchRec path `torchrec.distributed.planner.proposers`).

TorchRec's users patch `torchrec.distributed.planner.proposers.logger` to watch the proposers'
messages; here `logger` stands for `shardrec_planner.proposers.logger`, which every proposer
(the offload scale-up one included) looks up when it logs, so patching it here reaches them.
"""

from shardrec_planner import proposers as _proposers
from shardrec_planner.forwarding import forward_attributes
from shardrec_planner.offload_scaleup import EmbeddingOffloadScaleupProposer
from shardrec_planner.proposers import (
    DynamicProgrammingProposer,
    GreedyProposer,
    GridSearchProposer,
    Proposer,
    UniformProposer,
    _sharding_option_score,
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


forward_attributes(__name__, _proposers, ["logger"])
