"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline.train_pipelines`)."""

from shardrec_dmp import (
    PrefetchTrainPipelineSparseDist,
    TrainPipeline,
    TrainPipelineBase,
    TrainPipelineSparseDist,
)

__all__ = [
    "PrefetchTrainPipelineSparseDist",
    "TrainPipeline",
    "TrainPipelineBase",
    "TrainPipelineSparseDist",
]
