"""DistributedModelParallel (TorchRec path `torchrec.distributed.model_parallel`)."""

from shardrec_dmp import (
    DataParallelWrapper,
    DefaultDataParallelWrapper,
    DistributedModelParallel,
    default_sharders,
)

__all__ = [
    "DataParallelWrapper",
    "DefaultDataParallelWrapper",
    "DistributedModelParallel",
    "default_sharders",
]
