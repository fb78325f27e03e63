"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline.train_pipelines`)."""

from shardrec_dmp import TrainPipeline, TrainPipelineBase, TrainPipelineSparseDist
from shardrec_dmp import PrefetchTrainPipelineSparseDist

__all__ = [
    "PrefetchTrainPipelineSparseDist",
    "TrainPipeline",
    "TrainPipelineBase",
    "TrainPipelineSparseDist",
]
