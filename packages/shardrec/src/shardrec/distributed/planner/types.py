"""Planner inputs and errors (TorchRec path `torchrec.distributed.planner.types`)."""

from shardrec_planner import ParameterConstraints, PlannerError, Topology

__all__ = ["ParameterConstraints", "PlannerError", "Topology"]
