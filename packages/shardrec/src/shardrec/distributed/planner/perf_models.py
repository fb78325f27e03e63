"""Plan ratings (TorchRec path `torchrec.distributed.planner.perf_models`)."""

from shardrec_planner.perf_models import NoopPerfModel, NoopStorageModel

__all__ = ["NoopPerfModel", "NoopStorageModel"]
