"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline`)."""

from shardrec_dmp import Pipelineable, TrainPipeline, TrainPipelineBase, TrainPipelineSparseDist

__all__ = ["Pipelineable", "TrainPipeline", "TrainPipelineBase", "TrainPipelineSparseDist"]
