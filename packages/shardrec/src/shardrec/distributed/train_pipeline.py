"""The sparse-dist train pipeline (TorchRec path `torchrec.distributed.train_pipeline`)."""

from shardrec_dmp import Pipelineable, TrainPipelineSparseDist

__all__ = ["Pipelineable", "TrainPipelineSparseDist"]
