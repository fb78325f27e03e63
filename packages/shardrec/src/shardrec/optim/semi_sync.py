"""Semi-synchronous training (TorchRec path `torchrec.optim.semi_sync`)."""

from shardrec_optim.semi_sync import (
    SEMI_SYNC_GLOBAL_OPTIM_KEY,
    SEMI_SYNC_GLOBAL_STATE_KEY,
    SEMI_SYNC_LOCAL_OPTIM_KEY,
    SEMI_SYNC_LOCAL_STATE_KEY,
    SEMISYNC_GLOBAL_STEP_COUNTER_KEY,
    SEMISYNC_LOCAL_STEP_COUNTER_KEY,
    SemisyncOptimizer,
)

__all__ = [
    "SEMISYNC_GLOBAL_STEP_COUNTER_KEY",
    "SEMISYNC_LOCAL_STEP_COUNTER_KEY",
    "SEMI_SYNC_GLOBAL_OPTIM_KEY",
    "SEMI_SYNC_GLOBAL_STATE_KEY",
    "SEMI_SYNC_LOCAL_OPTIM_KEY",
    "SEMI_SYNC_LOCAL_STATE_KEY",
    "SemisyncOptimizer",
]
