"""TorchRec's partitioners (TorchRec path `torchrec.distributed.planner.partitioners`)."""

from shardrec_planner.partitioners import (
    GreedyPerfPartitioner,
    MemoryBalancedPartitioner,
    OrderedDeviceHardware,
    ShardingOptionGroup,
    SortBy,
    set_hbm_per_device,
)

__all__ = [
    "GreedyPerfPartitioner",
    "MemoryBalancedPartitioner",
    "OrderedDeviceHardware",
    "ShardingOptionGroup",
    "SortBy",
    "set_hbm_per_device",
]
