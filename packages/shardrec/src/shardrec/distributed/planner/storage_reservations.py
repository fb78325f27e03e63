"""Storage reservations (TorchRec path `torchrec.distributed.planner.storage_reservations`)."""

# TorchRec's private helpers, which TorchRec users' tests reach for.
from shardrec_planner.storage_reservations import (  # noqa: F401
    FixedAbsoluteStorageReservation,
    FixedPercentageStorageReservation,
    HeuristicalStorageReservation,
    _get_batch_inputs_and_shardable_parameters,
    _get_kjt_storage,
    _get_module_size,
)

__all__ = [
    "FixedAbsoluteStorageReservation",
    "FixedPercentageStorageReservation",
    "HeuristicalStorageReservation",
]
