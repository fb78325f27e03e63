"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline`)."""

from shardrec_dmp import (
    Pipelineable,
    PrefetchTrainPipelineSparseDist,
    TrainPipeline,
    TrainPipelineBase,
    TrainPipelineSparseDist,
)

__all__ = [
    "Pipelineable",
    "PrefetchTrainPipelineSparseDist",
    "TrainPipeline",
    "TrainPipelineBase",
    "TrainPipelineSparseDist",
]
