"""Manual plans and default sharders (TorchRec path `torchrec.distributed.sharding_plan`)."""

from shardrec_planner import (
    ParameterShardingGenerator,
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    grid_shard,
    placement,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_sharding import apply_to_all, get_default_sharders, get_module_to_default_sharders

__all__ = [
    "ParameterShardingGenerator",
    "apply_to_all",
    "column_wise",
    "construct_module_sharding_plan",
    "data_parallel",
    "get_default_sharders",
    "get_module_to_default_sharders",
    "grid_shard",
    "placement",
    "row_wise",
    "table_column_wise",
    "table_row_wise",
    "table_wise",
]
