"""The train pipelines (TorchRec path `torchrec.distributed.train_pipeline`)."""

from shardrec_dmp import Pipelineable, TrainPipeline, TrainPipelineBase, TrainPipelineSparseDist
from shardrec_dmp import PrefetchTrainPipelineSparseDist

__all__ = [
    "Pipelineable",
    "PrefetchTrainPipelineSparseDist",
    "TrainPipeline",
    "TrainPipelineBase",
    "TrainPipelineSparseDist",
]
