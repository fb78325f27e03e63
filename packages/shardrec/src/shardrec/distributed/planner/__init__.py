"""The planner (TorchRec path `torchrec.distributed.planner`)."""

from shardrec_planner import EmbeddingShardingPlanner, ParameterConstraints, Topology

__all__ = ["EmbeddingShardingPlanner", "ParameterConstraints", "Topology"]
