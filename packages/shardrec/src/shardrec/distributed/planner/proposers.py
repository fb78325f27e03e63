"""TorchRec's proposers (TorchRec path `torchrec.distributed.planner.proposers`).

TorchRec's users patch `torchrec.distributed.planner.proposers.logger` to watch the proposers'
messages; here `logger` forwards to `shardrec_planner.proposers.logger`, which every proposer
(the offload scale-up one included) looks up when it logs, so patching it here reaches them.
"""

import logging
import sys
import types

from shardrec_planner import proposers as _proposers
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


class _ForwardedLogger(types.ModuleType):
    """This module, with `logger` read, set and deleted (restored) on `shardrec_planner`'s."""

    @property
    def logger(self) -> logging.Logger:
        return _proposers.logger

    @logger.setter
    def logger(self, value: logging.Logger) -> None:
        _proposers.logger = value

    @logger.deleter
    def logger(self) -> None:
        _proposers.logger = logging.getLogger(_proposers.__name__)


sys.modules[__name__].__class__ = _ForwardedLogger
