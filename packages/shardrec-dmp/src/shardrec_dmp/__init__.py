"""DistributedModelParallel, the sparse-dist train pipeline, and resharding checkpoints."""

from shardrec_dmp.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    load,
    read_metadata,
    save,
    saved_shapes,
    verify,
)
from shardrec_dmp.data_parallel import DataParallelWrapper, DefaultDataParallelWrapper
from shardrec_dmp.full_state import full_state_dict, iter_full_state_dict
from shardrec_dmp.model_parallel import (
    DistributedModelParallel,
    default_sharders,
    get_module,
    get_unwrapped_module,
)
from shardrec_dmp.pipeline_base import TrainPipeline, TrainPipelineBase
from shardrec_dmp.prefetch_pipeline import PrefetchTrainPipelineSparseDist
from shardrec_dmp.shard import shard_modules
from shardrec_dmp.state_dict_transform import state_dict_gather, state_dict_to_device
from shardrec_dmp.train_pipeline import Pipelineable, TrainPipelineSparseDist
from shardrec_dmp.unsharded import get_unsharded_module_names

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "DataParallelWrapper",
    "DefaultDataParallelWrapper",
    "DistributedModelParallel",
    "Pipelineable",
    "PrefetchTrainPipelineSparseDist",
    "TrainPipeline",
    "TrainPipelineBase",
    "TrainPipelineSparseDist",
    "default_sharders",
    "full_state_dict",
    "get_module",
    "get_unsharded_module_names",
    "get_unwrapped_module",
    "iter_full_state_dict",
    "load",
    "read_metadata",
    "save",
    "saved_shapes",
    "shard_modules",
    "state_dict_gather",
    "state_dict_to_device",
    "verify",
]
