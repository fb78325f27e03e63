"""TorchRec's library logger (TorchRec path `torchrec.distributed.logger`).

`static_logger` is the parent of the planner's module loggers (`shardrec_planner.*`): what the
planner warns about (a `HardwareConfig` reading that looks wrong, a `TrainerConfig` capacity
far from the detected one) reaches it, so `assertLogs(static_logger)` and handlers attached to
it see those warnings. shardrec logs on every rank; there is no rank-0 filtering.
"""

from shardrec_planner.topology_factory import static_logger

__all__ = ["static_logger"]
