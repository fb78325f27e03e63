"""DistributedModelParallel (TorchRec path `torchrec.distributed.model_parallel`)."""

from shardrec_dmp import (
    DataParallelWrapper,
    DefaultDataParallelWrapper,
    DistributedModelParallel,
    default_sharders,
    get_module,
    get_unwrapped_module,
)
from shardrec_sharding import get_default_sharders

__all__ = [
    "DataParallelWrapper",
    "DefaultDataParallelWrapper",
    "DistributedModelParallel",
    "default_sharders",
    "get_default_sharders",
    "get_module",
    "get_unwrapped_module",
]
