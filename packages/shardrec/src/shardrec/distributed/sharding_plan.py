"""Manual plans (TorchRec path `torchrec.distributed.sharding_plan`)."""

from shardrec_planner import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    grid_shard,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)

__all__ = [
    "column_wise",
    "construct_module_sharding_plan",
    "data_parallel",
    "grid_shard",
    "row_wise",
    "table_column_wise",
    "table_row_wise",
    "table_wise",
]
