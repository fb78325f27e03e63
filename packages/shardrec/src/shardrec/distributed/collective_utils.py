"""Collective control flow (TorchRec path `torchrec.distributed.collective_utils`)."""

from shardrec_collectives.collective_utils import (
    _resolve_enablement_on_leader,
    create_on_rank_and_share_result,
    init_collective_validation,
    invoke_on_rank_and_broadcast_result,
    is_leader,
    run_on_leader,
    validate_collectives_enabled,
)

__all__ = [
    "_resolve_enablement_on_leader",
    "create_on_rank_and_share_result",
    "init_collective_validation",
    "invoke_on_rank_and_broadcast_result",
    "is_leader",
    "run_on_leader",
    "validate_collectives_enabled",
]
