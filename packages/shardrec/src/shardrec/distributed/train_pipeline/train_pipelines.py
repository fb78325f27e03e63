"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline.train_pipelines`)."""

from shardrec_dmp import TrainPipeline, TrainPipelineBase, TrainPipelineSparseDist

__all__ = ["TrainPipeline", "TrainPipelineBase", "TrainPipelineSparseDist"]
