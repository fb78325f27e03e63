"""The planner (TorchRec path `torchrec.distributed.planner.planners`)."""

from shardrec_planner import EmbeddingShardingPlanner

__all__ = ["EmbeddingShardingPlanner"]
