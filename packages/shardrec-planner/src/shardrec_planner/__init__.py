"""The sharding plan data model and the planner that chooses it."""

from shardrec_planner.cache_params import (
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
)
from shardrec_planner.cache_stats import (
    CacheStatistics,
    SampledCacheStatistics,
    lru_hit_rate,
)
from shardrec_planner.calibration import Calibration, calibrate
from shardrec_planner.chart import PlanChartData, plan_chart_data, save_plan_chart
from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.errors import PlannerError, PlannerErrorType
from shardrec_planner.geometry import MIN_CW_DIM, column_block_size, row_block_sizes, shard_geometry
from shardrec_planner.host import HostInfo, detect_host
from shardrec_planner.kernel_choice import executed_kernel, kernel_notes, sharded_kernels
from shardrec_planner.manual import (
    ParameterShardingGenerator,
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    grid_shard,
    row_wise,
    table_column_wise,
    table_row_wise,
    table_wise,
)
from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.perf_models import NoopPerfModel, NoopStorageModel
from shardrec_planner.planner import EmbeddingShardingPlanner
from shardrec_planner.planner_types import DeviceHardware, Perf, Shard, ShardingOption, Storage
from shardrec_planner.probe_search import BinarySearchPredicate, LuusJaakolaSearch
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata, placement
from shardrec_planner.sharder import (
    EmbeddingTableSharder,
    ModuleSharder,
    PlannerSharder,
    TableInfo,
)
from shardrec_planner.sharding_plan import EmbeddingModuleShardingPlan, ShardingPlan
from shardrec_planner.stats import PlanStats, RankStats, TableDecision
from shardrec_planner.storage_reservations import (
    FixedAbsoluteStorageReservation,
    FixedPercentageStorageReservation,
    HeuristicalStorageReservation,
)
from shardrec_planner.topology import Topology

__all__ = [
    "MIN_CW_DIM",
    "BinarySearchPredicate",
    "BoundsCheckMode",
    "CacheAlgorithm",
    "CacheParams",
    "CacheStatistics",
    "Calibration",
    "DeviceHardware",
    "EmbeddingComputeKernel",
    "EmbeddingModuleShardingPlan",
    "EmbeddingShardingPlanner",
    "EmbeddingTableSharder",
    "EnumerableShardingSpec",
    "FixedAbsoluteStorageReservation",
    "FixedPercentageStorageReservation",
    "HeuristicalStorageReservation",
    "HostInfo",
    "KeyValueParams",
    "LuusJaakolaSearch",
    "ModuleSharder",
    "NoopPerfModel",
    "NoopStorageModel",
    "ParameterConstraints",
    "ParameterSharding",
    "ParameterShardingGenerator",
    "Perf",
    "PlanChartData",
    "PlanStats",
    "PlannerError",
    "PlannerErrorType",
    "PlannerSharder",
    "RankStats",
    "SampledCacheStatistics",
    "Shard",
    "ShardMetadata",
    "ShardingOption",
    "ShardingPlan",
    "ShardingType",
    "Storage",
    "TableDecision",
    "TableInfo",
    "Topology",
    "calibrate",
    "column_block_size",
    "column_wise",
    "construct_module_sharding_plan",
    "data_parallel",
    "detect_host",
    "executed_kernel",
    "grid_shard",
    "kernel_notes",
    "lru_hit_rate",
    "placement",
    "plan_chart_data",
    "row_block_sizes",
    "row_wise",
    "save_plan_chart",
    "shard_geometry",
    "sharded_kernels",
    "table_column_wise",
    "table_row_wise",
    "table_wise",
]
