"""DistributedModelParallel (TorchRec path `torchrec.distributed.model_parallel`)."""

from shardrec_dmp import DistributedModelParallel, default_sharders

__all__ = ["DistributedModelParallel", "default_sharders"]
