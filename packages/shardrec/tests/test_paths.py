"""Every TorchRec-familiar path re-exports the component's own object, not a copy."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types

import pytest

import shardrec

# (umbrella module, name, component module that defines it)
PATHS = [
    ("shardrec.test_utils", "get_free_port", "shardrec_testing"),
    ("shardrec.test_utils", "skip_if_asan", "shardrec_testing"),
    ("shardrec.test_utils", "skip_if_asan_class", "shardrec_testing"),
    ("shardrec.optim.fused", "EmptyFusedOptimizer", "shardrec_optim"),
    ("shardrec.optim.fused", "FusedOptimizer", "shardrec_optim"),
    ("shardrec.optim.fused", "FusedOptimizerModule", "shardrec_optim"),
    (
        "shardrec.quant.embedding_modules",
        "MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING",
        "shardrec_embedding.quant",
    ),
    (
        "shardrec.quant.embedding_modules",
        "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
        "shardrec_embedding.quant",
    ),
    (
        "shardrec.distributed.quant_embedding",
        "QuantEmbeddingCollectionSharder",
        "shardrec_sharding",
    ),
    (
        "shardrec.distributed.quant_embedding",
        "ShardedQuantEmbeddingCollection",
        "shardrec_sharding",
    ),
    (
        "shardrec.distributed.quant_embeddingbag",
        "QuantEmbeddingBagCollectionSharder",
        "shardrec_sharding",
    ),
    (
        "shardrec.distributed.quant_embeddingbag",
        "ShardedQuantEmbeddingBagCollection",
        "shardrec_sharding",
    ),
    ("shardrec.fx", "Tracer", "shardrec_jagged"),
    ("shardrec.fx", "symbolic_trace", "shardrec_jagged"),
    ("shardrec.fx.tracer", "Tracer", "shardrec_jagged"),
    ("shardrec.fx.tracer", "is_fx_tracing", "shardrec_jagged"),
    ("shardrec.fx.tracer", "symbolic_trace", "shardrec_jagged"),
    ("shardrec.models.dlrm", "DLRM", "shardrec_models"),
    ("shardrec.models.dlrm", "DLRM_DCN", "shardrec_models"),
    ("shardrec.models.dlrm", "DLRMTrain", "shardrec_models"),
    ("shardrec.models.dlrm", "DenseArch", "shardrec_models"),
    ("shardrec.models.dlrm", "InteractionArch", "shardrec_models"),
    ("shardrec.models.dlrm", "InteractionDCNArch", "shardrec_models"),
    ("shardrec.models.dlrm", "OverArch", "shardrec_models"),
    ("shardrec.models.dlrm", "SparseArch", "shardrec_models"),
    ("shardrec.modules.mlp", "MLP", "shardrec_models"),
    ("shardrec.modules.mlp", "Perceptron", "shardrec_models"),
    ("shardrec.modules.crossnet", "LowRankCrossNet", "shardrec_models"),
    ("shardrec.datasets", "DATASET_NAMES", "shardrec_data"),
    ("shardrec.datasets", "SPLITS", "shardrec_data"),
    ("shardrec.datasets", "ArrayDataset", "shardrec_data"),
    ("shardrec.datasets", "Batch", "shardrec_data"),
    ("shardrec.datasets", "RecDataset", "shardrec_data"),
    ("shardrec.datasets", "SparseFeature", "shardrec_data"),
    ("shardrec.datasets", "SyntheticConfig", "shardrec_data"),
    ("shardrec.datasets", "SyntheticDataset", "shardrec_data"),
    ("shardrec.datasets", "load_dataset", "shardrec_data"),
    ("shardrec.datasets", "shard_indices", "shardrec_data"),
    ("shardrec.metrics", "AUC", "shardrec_metrics"),
    ("shardrec.metrics", "NE", "shardrec_metrics"),
    ("shardrec.metrics", "Accuracy", "shardrec_metrics"),
    ("shardrec.metrics", "LogLoss", "shardrec_metrics"),
    ("shardrec.metrics", "MetricCollection", "shardrec_metrics"),
    ("shardrec.metrics", "RecMetric", "shardrec_metrics"),
    ("shardrec.metrics", "Throughput", "shardrec_metrics"),
    ("shardrec.metrics", "roc_auc", "shardrec_metrics"),
    ("shardrec.distributed", "DistributedModelParallel", "shardrec_dmp"),
    ("shardrec.distributed", "TrainPipelineSparseDist", "shardrec_dmp"),
    ("shardrec.distributed", "Awaitable", "shardrec_collectives"),
    ("shardrec.distributed", "NoWait", "shardrec_collectives"),
    ("shardrec.distributed", "ShardingEnv", "shardrec_collectives"),
    ("shardrec.distributed", "ParameterSharding", "shardrec_planner"),
    ("shardrec.distributed", "ModuleSharder", "shardrec_planner"),
    ("shardrec.distributed", "get_local_rank", "shardrec_collectives"),
    ("shardrec.distributed", "get_local_size", "shardrec_collectives"),
    ("shardrec.distributed.train_pipeline", "TrainPipelineSparseDist", "shardrec_dmp"),
    ("shardrec.distributed.train_pipeline", "Pipelineable", "shardrec_dmp"),
    ("shardrec.streamable", "Pipelineable", "shardrec_dmp"),
    ("shardrec", "Pipelineable", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "DistributedModelParallel", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "default_sharders", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "DataParallelWrapper", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "DefaultDataParallelWrapper", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "get_module", "shardrec_dmp"),
    ("shardrec.distributed.model_parallel", "get_unwrapped_module", "shardrec_dmp"),
    ("shardrec", "JaggedTensor", "shardrec_jagged"),
    ("shardrec", "KeyedJaggedTensor", "shardrec_jagged"),
    ("shardrec", "KeyedTensor", "shardrec_jagged"),
    ("shardrec", "DataType", "shardrec_embedding"),
    ("shardrec", "EmbeddingBagCollection", "shardrec_embedding"),
    ("shardrec", "EmbeddingBagConfig", "shardrec_embedding"),
    ("shardrec", "EmbeddingCollection", "shardrec_embedding"),
    ("shardrec", "EmbeddingConfig", "shardrec_embedding"),
    ("shardrec", "PoolingType", "shardrec_embedding"),
    ("shardrec.sparse.jagged_tensor", "JaggedTensor", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "KeyedJaggedTensor", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "KeyedTensor", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "jt_is_equal", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "kjt_is_equal", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor_validator", "validate_keyed_jagged_tensor", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "ComputeJTDictToKJT", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "ComputeKJTToJTDict", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "permute_multi_embedding", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "regroup_kts", "shardrec_jagged"),
    ("shardrec.sparse.jagged_tensor", "_safe_tolist", "shardrec_jagged.torchrec_private"),
    ("shardrec.sparse.jagged_tensor", "_all_keys_used_once", "shardrec_jagged.torchrec_private"),
    ("shardrec.sparse.jagged_tensor", "_regroup_keyed_tensors", "shardrec_jagged.torchrec_private"),
    (
        "shardrec.sparse.jagged_tensor",
        "_fbgemm_permute_pooled_embs",
        "shardrec_jagged.torchrec_private",
    ),
    ("shardrec.modules.embedding_configs", "BaseEmbeddingConfig", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "DataType", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "EmbeddingBagConfig", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "EmbeddingConfig", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "PoolingType", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "data_type_to_dtype", "shardrec_embedding"),
    ("shardrec.modules.embedding_configs", "dtype_to_data_type", "shardrec_embedding"),
    ("shardrec.modules.embedding_modules", "EmbeddingBagCollection", "shardrec_embedding"),
    ("shardrec.modules.embedding_modules", "EmbeddingCollection", "shardrec_embedding"),
    (
        "shardrec.modules.fused_embedding_modules",
        "FusedEmbeddingBagCollection",
        "shardrec_embedding",
    ),
    (
        "shardrec.modules.fused_embedding_modules",
        "fuse_embedding_optimizer",
        "shardrec_embedding.fused",
    ),
    ("shardrec.modules.feature_processor_", "PositionWeightedModule", "shardrec_embedding"),
    (
        "shardrec.modules.feature_processor_",
        "PositionWeightedModuleCollection",
        "shardrec_embedding",
    ),
    (
        "shardrec.modules.fp_embedding_modules",
        "FeatureProcessedEmbeddingBagCollection",
        "shardrec_embedding",
    ),
    ("shardrec.optim", "CombinedOptimizer", "shardrec_optim"),
    ("shardrec.optim", "KeyedOptimizer", "shardrec_optim"),
    ("shardrec.optim", "KeyedOptimizerWrapper", "shardrec_optim"),
    ("shardrec.optim", "OptimizerWrapper", "shardrec_optim"),
    ("shardrec.optim", "WarmupOptimizer", "shardrec_optim"),
    ("shardrec.optim", "WarmupPolicy", "shardrec_optim"),
    ("shardrec.optim", "WarmupStage", "shardrec_optim"),
    ("shardrec.optim.keyed", "CombinedOptimizer", "shardrec_optim"),
    ("shardrec.optim.keyed", "KeyedOptimizer", "shardrec_optim"),
    ("shardrec.optim.keyed", "KeyedOptimizerWrapper", "shardrec_optim"),
    ("shardrec.optim.keyed", "OptimizerWrapper", "shardrec_optim"),
    ("shardrec.optim.optimizers", "in_backward_optimizer_filter", "shardrec_optim"),
    ("shardrec.optim.apply_optimizer_in_backward", "apply_optimizer_in_backward", "shardrec_optim"),
    ("shardrec.optim.warmup", "WarmupOptimizer", "shardrec_optim"),
    ("shardrec.optim.warmup", "WarmupPolicy", "shardrec_optim"),
    ("shardrec.optim.warmup", "WarmupStage", "shardrec_optim"),
    ("shardrec.optim.clipping", "GradientClipping", "shardrec_optim"),
    ("shardrec.optim.clipping", "GradientClippingOptimizer", "shardrec_optim"),
    ("shardrec.optim", "SemisyncOptimizer", "shardrec_optim"),
    ("shardrec.optim.semi_sync", "SemisyncOptimizer", "shardrec_optim"),
    ("shardrec.optim.semi_sync", "SEMISYNC_GLOBAL_STEP_COUNTER_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.optim.semi_sync", "SEMISYNC_LOCAL_STEP_COUNTER_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.optim.semi_sync", "SEMI_SYNC_GLOBAL_OPTIM_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.optim.semi_sync", "SEMI_SYNC_GLOBAL_STATE_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.optim.semi_sync", "SEMI_SYNC_LOCAL_OPTIM_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.optim.semi_sync", "SEMI_SYNC_LOCAL_STATE_KEY", "shardrec_optim.semi_sync"),
    ("shardrec.distributed", "EmbeddingBagCollectionSharder", "shardrec_sharding"),
    ("shardrec.distributed", "EmbeddingCollectionSharder", "shardrec_sharding"),
    ("shardrec.distributed.types", "Awaitable", "shardrec_collectives"),
    ("shardrec.distributed.types", "PipelineType", "shardrec_planner.shard_storage"),
    ("shardrec.distributed.types", "MultiPassPrefetchConfig", "shardrec_planner.cache_params"),
    ("shardrec.distributed.types", "StorageUsageType", "shardrec_planner.shard_storage"),
    ("shardrec.distributed.types", "compute_storage_usage", "shardrec_planner.shard_storage"),
    ("shardrec.distributed.types", "get_tensor_size_bytes", "shardrec_planner.shard_storage"),
    ("shardrec.distributed.embeddingbag", "EmbeddingBagCollection", "shardrec_embedding"),
    (
        "shardrec.distributed.planner.constants",
        "DEFAULT_PERF_ESTIMATOR",
        "shardrec_planner.perf_estimator_factory",
    ),
    (
        "shardrec.distributed.planner.estimator",
        "DEFAULT_PERF_ESTIMATOR",
        "shardrec_planner.perf_estimator_factory",
    ),
    (
        "shardrec.distributed.planner.estimator",
        "EmbeddingPerfEstimatorFactory",
        "shardrec_planner.perf_estimator_factory",
    ),
    (
        "shardrec.distributed.planner.estimator",
        "EmbeddingPerfEstimator",
        "shardrec_planner.shard_perf",
    ),
    ("shardrec.distributed.types", "LazyAwaitable", "shardrec_collectives"),
    ("shardrec.distributed.types", "LazyNoWait", "shardrec_collectives"),
    ("shardrec.distributed.types", "DataType", "shardrec_embedding"),
    ("shardrec.distributed.types", "NoWait", "shardrec_collectives"),
    ("shardrec.distributed.types", "ShardingEnv", "shardrec_collectives"),
    ("shardrec.distributed.types", "ParameterSharding", "shardrec_planner"),
    ("shardrec.distributed.types", "ShardingPlan", "shardrec_planner"),
    ("shardrec.distributed.types", "ShardingType", "shardrec_planner"),
    ("shardrec.distributed.types", "EnumerableShardingSpec", "shardrec_planner"),
    ("shardrec.distributed.types", "ShardMetadata", "shardrec_planner"),
    ("shardrec.distributed.types", "ModuleSharder", "shardrec_planner"),
    ("shardrec.distributed.types", "EmbeddingModuleShardingPlan", "shardrec_planner"),
    ("shardrec.distributed.embedding_types", "EmbeddingComputeKernel", "shardrec_planner"),
    ("shardrec.distributed.types", "CacheParams", "shardrec_planner"),
    ("shardrec.distributed.types", "DataType", "shardrec_embedding"),
    ("shardrec.distributed.types", "CacheAlgorithm", "shardrec_planner"),
    ("shardrec.distributed.types", "KeyValueParams", "shardrec_planner"),
    ("shardrec.distributed.types", "BoundsCheckMode", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "Perf", "shardrec_planner"),
    ("shardrec.distributed.logger", "static_logger", "shardrec_planner.topology_factory"),
    ("shardrec.distributed.planner.types", "Storage", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "PartitionByType", "shardrec_planner.planner_types"),
    ("shardrec.distributed.planner.types", "PipelineType", "shardrec_planner.shard_storage"),
    ("shardrec.distributed.planner.types", "ShardEstimator", "shardrec_planner.enumerators"),
    (
        "shardrec.distributed.planner.enumerators",
        "EmbeddingEnumerator",
        "shardrec_planner.enumerators",
    ),
    ("shardrec.distributed.planner.enumerators", "ShardEstimator", "shardrec_planner.enumerators"),
    (
        "shardrec.distributed.planner.enumerators",
        "get_partition_by_type",
        "shardrec_planner.enumerators",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "EmbeddingPerfEstimator",
        "shardrec_planner.shard_perf",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "EmbeddingStorageEstimator",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "PipelineType",
        "shardrec_planner.shard_storage",
    ),
    ("shardrec.distributed.planner.proposers", "GreedyProposer", "shardrec_planner.proposers"),
    ("shardrec.distributed.planner.proposers", "GridSearchProposer", "shardrec_planner.proposers"),
    ("shardrec.distributed.planner.proposers", "Proposer", "shardrec_planner.proposers"),
    ("shardrec.distributed.planner.types", "Proposer", "shardrec_planner.proposers"),
    ("shardrec.distributed.planner.types", "InvalidValueError", "shardrec_planner.errors"),
    (
        "shardrec.distributed.planner.partitioners",
        "GreedyPerfPartitioner",
        "shardrec_planner.partitioners",
    ),
    (
        "shardrec.distributed.planner.partitioners",
        "MemoryBalancedPartitioner",
        "shardrec_planner.partitioners",
    ),
    (
        "shardrec.distributed.planner.partitioners",
        "OrderedDeviceHardware",
        "shardrec_planner.partitioners",
    ),
    (
        "shardrec.distributed.planner.partitioners",
        "ShardingOptionGroup",
        "shardrec_planner.partitioners",
    ),
    ("shardrec.distributed.planner.partitioners", "SortBy", "shardrec_planner.partitioners"),
    (
        "shardrec.distributed.planner.partitioners",
        "set_hbm_per_device",
        "shardrec_planner.partitioners",
    ),
    (
        "shardrec.distributed.planner.proposers",
        "DynamicProgrammingProposer",
        "shardrec_planner.proposers",
    ),
    ("shardrec.distributed.planner.proposers", "UniformProposer", "shardrec_planner.proposers"),
    (
        "shardrec.distributed.planner.proposers",
        "_sharding_option_score",
        "shardrec_planner.proposers",
    ),
    (
        "shardrec.distributed.planner.proposers",
        "proposers_to_proposals_list",
        "shardrec_planner.proposers",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "EmbeddingOffloadStats",
        "shardrec_planner.offload_stats",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "InvalidEstimateError",
        "shardrec_planner.offload_stats",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_validate_io_sizes",
        "shardrec_planner.offload_stats",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_validate_perf",
        "shardrec_planner.offload_stats",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_cw_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_dp_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_rw_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_storage_specific_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_tw_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_calculate_twrw_shard_io_sizes",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "_get_optimizer_multipler",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "calculate_pipeline_io_cost",
        "shardrec_planner.shard_storage",
    ),
    (
        "shardrec.distributed.planner.shard_estimators",
        "calculate_shard_storages",
        "shardrec_planner.shard_storage",
    ),
    ("shardrec.distributed.planner.types", "Shard", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "ShardingOption", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "PlannerErrorType", "shardrec_planner"),
    ("shardrec.distributed.planner.constants", "kernel_bw_lookup", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "BATCHED_COPY_PERF_FACTOR",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.constants", "BATCH_SIZE", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "BIGINT_DTYPE", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "BWD_COMPUTE_MULTIPLIER",
        "shardrec_planner.constants",
    ),
    (
        "shardrec.distributed.planner.constants",
        "CROSS_NODE_BANDWIDTH",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.constants", "DDR_CAP", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "DDR_MEM_BW", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "DP_ELEMENTWISE_KERNELS_PERF_FACTOR",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.constants", "FULL_BLOCK_EMB_DIM", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "HALF_BLOCK_PENALTY", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "HBM_CAP", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "HBM_MEM_BW", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "HBM_TO_DDR_MEM_BW", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "HUNDRED_GB", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "INTRA_NODE_BANDWIDTH",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.constants", "MAX_SIZE", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "MIN_CW_DIM", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "NUM_POOLINGS", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "POOLING_FACTOR", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "QUARTER_BLOCK_PENALTY",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.constants", "SSD_MEM_BW", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "SSD_CAP", "shardrec_planner.constants"),
    ("shardrec.distributed.planner.constants", "UVM_CACHING_RATIO", "shardrec_planner.constants"),
    (
        "shardrec.distributed.planner.constants",
        "WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER",
        "shardrec_planner.constants",
    ),
    (
        "shardrec.distributed.planner.constants",
        "WEIGHTED_KERNEL_MULTIPLIER",
        "shardrec_planner.constants",
    ),
    ("shardrec.distributed.planner.perf_models", "NoopPerfModel", "shardrec_planner"),
    ("shardrec.distributed.planner.perf_models", "NoopStorageModel", "shardrec_planner"),
    ("shardrec.distributed.planner.utils", "BinarySearchPredicate", "shardrec_planner"),
    ("shardrec.distributed.planner.utils", "LuusJaakolaSearch", "shardrec_planner"),
    ("shardrec.distributed.planner.utils", "reset_shard_rank", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "bytes_to_gb", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "bytes_to_mb", "shardrec_planner.planner_utils"),
    (
        "shardrec.distributed.planner.utils",
        "find_imbalance_tables",
        "shardrec_planner.planner_utils",
    ),
    ("shardrec.distributed.planner.utils", "gb_to_bytes", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "mb_to_bytes", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "placement", "shardrec_planner.shard_metadata"),
    ("shardrec.distributed.planner.utils", "prod", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "sharder_name", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.utils", "storage_repr_in_gb", "shardrec_planner.planner_utils"),
    ("shardrec.distributed.planner.types", "DeviceHardware", "shardrec_planner.planner_types"),
    (
        "shardrec.distributed.planner.types",
        "StorageReservation",
        "shardrec_planner.storage_reservations",
    ),
    ("shardrec.distributed.planner.planners", "EmbeddingShardingPlanner", "shardrec_planner"),
    (
        "shardrec.distributed.planner.planners",
        "validate_compute_kernels",
        "shardrec_planner.kernel_validation",
    ),
    ("shardrec.distributed.planner.stats", "chi_sq_divergence", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "kl_divergence", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "max_chi_sq_divergence", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "max_kl_divergence", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "normalize", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "total_distance", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "total_variation", "shardrec_planner.imbalance"),
    ("shardrec.distributed.planner.stats", "EmbeddingStats", "shardrec_planner.embedding_stats"),
    (
        "shardrec.distributed.planner.stats",
        "NoopEmbeddingStats",
        "shardrec_planner.embedding_stats",
    ),
    ("shardrec.distributed.planner.planners", "extract_plan", "shardrec_planner.pluggable"),
    (
        "shardrec.distributed.planner.planners",
        "validate_modules_inclusion_in_sharding_plan",
        "shardrec_planner.pluggable",
    ),
    ("shardrec.distributed.planner.types", "PlanLoader", "shardrec_planner.pluggable"),
    (
        "shardrec.distributed.planner.proposers",
        "EmbeddingOffloadScaleupProposer",
        "shardrec_planner.offload_scaleup",
    ),
    ("shardrec.distributed.utils", "none_throws", "shardrec_planner.optional"),
    (
        "shardrec.distributed.planner.storage_reservations",
        "FixedAbsoluteStorageReservation",
        "shardrec_planner",
    ),
    (
        "shardrec.distributed.planner.storage_reservations",
        "FixedPercentageStorageReservation",
        "shardrec_planner",
    ),
    (
        "shardrec.distributed.planner.storage_reservations",
        "HeuristicalStorageReservation",
        "shardrec_planner",
    ),
    ("shardrec.distributed.embeddingbag", "EmbeddingBagCollectionSharder", "shardrec_sharding"),
    ("shardrec.distributed.embeddingbag", "ShardedEmbeddingBagCollection", "shardrec_sharding"),
    ("shardrec.distributed.embedding", "EmbeddingCollectionSharder", "shardrec_sharding"),
    ("shardrec.distributed.embedding", "ShardedEmbeddingCollection", "shardrec_sharding"),
    ("shardrec.distributed.sharding_plan", "construct_module_sharding_plan", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "column_wise", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "data_parallel", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "grid_shard", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "row_wise", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "table_column_wise", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "table_row_wise", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "table_wise", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "ParameterShardingGenerator", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "placement", "shardrec_planner"),
    ("shardrec.distributed.sharding_plan", "apply_to_all", "shardrec_sharding"),
    ("shardrec.distributed.sharding_plan", "get_default_sharders", "shardrec_sharding"),
    (
        "shardrec.distributed.sharding_plan",
        "get_module_to_default_sharders",
        "shardrec_sharding",
    ),
    ("shardrec.distributed.planner", "EmbeddingShardingPlanner", "shardrec_planner"),
    ("shardrec.distributed.planner", "ParameterConstraints", "shardrec_planner"),
    ("shardrec.distributed.planner", "Topology", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "ParameterConstraints", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "PlannerError", "shardrec_planner"),
    ("shardrec.distributed.planner.types", "Topology", "shardrec_planner"),
    ("shardrec.distributed.dist_data", "EmbeddingsAllToOne", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "EmbeddingsAllToOneReduce", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "KJTAllToAll", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "KJTAllToAllSplitsAwaitable", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "KJTOneToAll", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "PooledEmbeddingsAllGather", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "PooledEmbeddingsAllToAll", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "PooledEmbeddingsAwaitable", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "PooledEmbeddingsReduceScatter", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "SeqEmbeddingsAllToOne", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "SequenceEmbeddingsAllToAll", "shardrec_collectives"),
    ("shardrec.distributed.dist_data", "SequenceEmbeddingsAwaitable", "shardrec_collectives"),
    (
        "shardrec.distributed.test_utils.multi_process",
        "MultiProcessContext",
        "shardrec_testing",
    ),
    (
        "shardrec.distributed.test_utils.multi_process",
        "MultiProcessTestBase",
        "shardrec_testing",
    ),
    (
        "shardrec.distributed.dist_data",
        "VariableBatchPooledEmbeddingsAllToAll",
        "shardrec_collectives",
    ),
    (
        "shardrec.distributed.dist_data",
        "VariableBatchPooledEmbeddingsReduceScatter",
        "shardrec_collectives",
    ),
    ("shardrec.distributed.comm", "get_group_rank", "shardrec_collectives"),
    ("shardrec.distributed.comm", "get_local_rank", "shardrec_collectives"),
    ("shardrec.distributed.comm", "get_local_size", "shardrec_collectives"),
    ("shardrec.distributed.comm", "get_num_groups", "shardrec_collectives"),
    ("shardrec.distributed.comm", "intra_and_cross_node_pg", "shardrec_collectives"),
]

# TorchRec 1.8's torchrec.optim / .modules / .models names added for issue 19.
PATHS += [
    ("shardrec.optim", "GradientClipping", "shardrec_optim"),
    ("shardrec.optim", "GradientClippingOptimizer", "shardrec_optim"),
    ("shardrec.optim", "RowWiseAdagrad", "shardrec_optim"),
    ("shardrec.optim.rowwise_adagrad", "RowWiseAdagrad", "shardrec_optim"),
    ("shardrec.optim.clipping", "_batch_cal_norm", "shardrec_optim.clipping"),
    ("shardrec.optim.clipping", "_compute_total_norm", "shardrec_optim.clipping"),
    ("shardrec.optim.clipping", "_get_grads", "shardrec_optim.clipping"),
    ("shardrec.modules.feature_processor_", "FeatureProcessor", "shardrec_embedding"),
    ("shardrec.modules.feature_processor_", "FeatureProcessorsCollection", "shardrec_embedding"),
    (
        "shardrec.modules.fp_embedding_modules",
        "FeatureProcessorDictWrapper",
        "shardrec_embedding",
    ),
    ("shardrec.modules.crossnet", "CrossNet", "shardrec_models"),
    ("shardrec.modules.crossnet", "VectorCrossNet", "shardrec_models"),
    ("shardrec.modules.crossnet", "LowRankMixtureCrossNet", "shardrec_models"),
    ("shardrec.models.dlrm", "DLRM_Projection", "shardrec_models"),
    ("shardrec.models.dlrm", "DLRMWrapper", "shardrec_models"),
    ("shardrec.models.dlrm", "InteractionProjectionArch", "shardrec_models"),
    ("shardrec.models.dlrm", "choose", "shardrec_models"),
    ("shardrec.modules.regroup", "KTRegroupAsDict", "shardrec_embedding"),
    ("shardrec.modules.regroup", "PermuteMultiEmbedding", "shardrec_embedding"),
    ("shardrec.modules.regroup", "module_init", "shardrec_embedding"),
    ("shardrec.modules.regroup", "_split_to_tensor_dict", "shardrec_embedding.regroup"),
    ("shardrec.modules.regroup", "_to_tensor_dict", "shardrec_embedding.regroup"),
    ("shardrec.types", "CacheMixin", "shardrec_embedding"),
    ("shardrec.types", "DataType", "shardrec_embedding"),
    ("shardrec.modules.activation", "SwishLayerNorm", "shardrec_models"),
    ("shardrec.modules.deepfm", "DeepFM", "shardrec_models"),
    ("shardrec.modules.deepfm", "FactorizationMachine", "shardrec_models"),
    ("shardrec.modules.embedding_tower", "EmbeddingTower", "shardrec_embedding"),
    ("shardrec.modules.embedding_tower", "EmbeddingTowerCollection", "shardrec_embedding"),
    ("shardrec.modules.embedding_tower", "tower_input_params", "shardrec_embedding"),
    ("shardrec.models.deepfm", "DenseArch", "shardrec_models.deepfm_nn"),
    ("shardrec.models.deepfm", "FMInteractionArch", "shardrec_models"),
    ("shardrec.models.deepfm", "OverArch", "shardrec_models.deepfm_nn"),
    ("shardrec.models.deepfm", "SimpleDeepFMNN", "shardrec_models"),
    ("shardrec.models.deepfm", "SimpleDeepFMNNWrapper", "shardrec_models"),
    ("shardrec.models.deepfm", "SparseArch", "shardrec_models.deepfm_nn"),
    ("shardrec.modules.lazy_extension", "LazyModuleExtensionMixin", "shardrec_models"),
    ("shardrec.modules.lazy_extension", "lazy_apply", "shardrec_models"),
    ("shardrec.modules.utils", "check_module_output_dimension", "shardrec_embedding.module_utils"),
    ("shardrec.modules.utils", "construct_jagged_tensors", "shardrec_embedding.module_utils"),
    (
        "shardrec.modules.utils",
        "construct_modulelist_from_single_module",
        "shardrec_embedding.module_utils",
    ),
    (
        "shardrec.modules.utils",
        "convert_list_of_modules_to_modulelist",
        "shardrec_embedding.module_utils",
    ),
    ("shardrec.modules.utils", "deterministic_dedup", "shardrec_embedding.module_utils"),
    (
        "shardrec.modules.utils",
        "extract_module_or_tensor_callable",
        "shardrec_embedding.module_utils",
    ),
    ("shardrec.modules.utils", "get_module_output_dimension", "shardrec_embedding.module_utils"),
    (
        "shardrec.modules.utils",
        "init_mlp_weights_xavier_uniform",
        "shardrec_embedding.module_utils",
    ),
]


def _names_of(component: str, path: str) -> list[tuple[str, str, str]]:
    """Every name of `path`'s `__all__`, defined (or re-exported) by `component`."""
    return [(path, n, component) for n in importlib.import_module(path).__all__]


# TorchRec's topology configs, comms models and planner-context hashing.
_PLANNER_TYPES_BY_COMPONENT = {
    "shardrec_planner.topology_parts": (
        "BasicCommsBandwidths CollectiveType CustomTopologyData GeneralizedCommsBandwidth"
    ),
    "shardrec_planner.topology_factory": (
        "HardwareConfig KernelConfig TrainerConfig TopologyConfigBase TopologyFactory"
    ),
    "shardrec_planner.sharder_data": "SharderData",
    "shardrec_planner.hashing": (
        "hash_planner_context_inputs hash_planner_context_inputs_str hash_sha256_str "
        "hash_sha256_to_int round_to_nearest"
    ),
}
PATHS += [
    ("shardrec.distributed.planner.types", name, component)
    for component, names in _PLANNER_TYPES_BY_COMPONENT.items()
    for name in names.split()
]
PATHS += [
    (path, name, "shardrec_planner.sharder_data")
    for path, names in {
        "shardrec.distributed.types": "StorageUsageType",
        "shardrec.distributed.embedding_types": "BaseEmbeddingSharder BaseQuantEmbeddingSharder",
        "shardrec.distributed.planner.utils": "build_sharder_data build_sharder_data_map",
    }.items()
    for name in names.split()
]

# TorchRec's dataset modules (shardrec.datasets.utils is the component module itself:
# test_torchrec_paths.py).
PATHS += [
    *[
        (p, n, c)
        for p, n, c in _names_of("shardrec_data", "shardrec.datasets.criteo")
        if n in ("BinaryCriteoUtils", "InMemoryBinaryCriteoIterDataPipe")
    ],
    *[
        (p, n, "shardrec_data.datapipes")
        for p, n, _ in _names_of("", "shardrec.datasets.criteo")
        if n in ("PATH_MANAGER_KEY", "Batch", "LoadFiles", "ReadLinesFromCSV", "safe_cast")
    ],
    *[
        (p, n, "shardrec_data.criteo_pipes")
        for p, n, _ in _names_of("", "shardrec.datasets.criteo")
        if n
        not in (
            "BinaryCriteoUtils",
            "InMemoryBinaryCriteoIterDataPipe",
            "PATH_MANAGER_KEY",
            "Batch",
            "LoadFiles",
            "ReadLinesFromCSV",
            "safe_cast",
        )
    ],
    *_names_of("shardrec_data.movielens_pipes", "shardrec.datasets.movielens"),
    *_names_of("shardrec_data", "shardrec.datasets.random"),
]

# Added to shared modules by the quantization work and tested there.
QUANTIZATION_PATHS = {("shardrec.modules.embedding_configs", "QuantConfig")}


@pytest.mark.parametrize(("path", "name", "component"), PATHS)
def test_path_reexports_component_object(path: str, name: str, component: str) -> None:
    umbrella = importlib.import_module(path)
    assert getattr(umbrella, name) is getattr(importlib.import_module(component), name)
    assert name in umbrella.__all__


def _umbrella_modules() -> list[types.ModuleType]:
    mods = [shardrec]
    for info in pkgutil.walk_packages(shardrec.__path__, prefix="shardrec."):
        mod = importlib.import_module(info.name)
        if mod.__name__ == info.name:  # an alias of a component module is checked by PATHS
            mods.append(mod)
    return mods


def test_every_exported_name_is_a_component_object() -> None:
    """Walk every umbrella module: each exported name is a submodule of the umbrella or an
    object defined in a component package, found there under its own name (the umbrella
    defines nothing; a TorchRec name may alias a component name)."""
    component_of = {(p, n): c for p, n, c in PATHS}
    walked = 0
    for mod in _umbrella_modules():
        assert "__all__" in vars(mod), f"{mod.__name__} has no __all__"
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, types.ModuleType):
                # a TorchRec path may be the component module itself (shardrec.datasets.utils)
                path = f"{mod.__name__}.{name}"
                assert obj.__name__ == path or sys.modules[path] is obj, (mod.__name__, name)
                continue
            walked += 1
            if (mod.__name__, name) in component_of:  # incl. type aliases without __module__
                component = importlib.import_module(component_of[mod.__name__, name])
                assert getattr(component, name) is obj, (mod.__name__, name)
                continue
            owner = str(getattr(obj, "__module__", ""))
            assert owner.startswith("shardrec_"), f"{mod.__name__}.{name} is defined in {owner}"
            defined = getattr(importlib.import_module(owner), obj.__name__)
            assert defined is obj, (mod.__name__, name)
    assert walked >= len(PATHS)


def test_every_listed_path_is_exported_and_every_export_listed() -> None:
    """PATHS and the modules agree, so the `is` check above covers every path by name."""
    quant = ("shardrec.quant", "shardrec.inference")
    listed = {(p, n) for p, n, _ in PATHS if not p.startswith(quant)}
    exported = {
        (mod.__name__, name)
        for mod in _umbrella_modules()
        # Quantization and inference paths belong to their own engineer's tests.
        if not mod.__name__.startswith(quant)
        for name in mod.__all__
        if not isinstance(getattr(mod, name), types.ModuleType)
        and (mod.__name__, name) not in QUANTIZATION_PATHS
    }
    assert exported - listed == set(), sorted(exported - listed)
    assert listed - exported == set(), sorted(listed - exported)


def test_every_listed_module_is_walked() -> None:
    listed = {p for p, _, _ in PATHS}
    for required in [
        "shardrec",
        "shardrec.sparse.jagged_tensor",
        "shardrec.modules.embedding_configs",
        "shardrec.modules.embedding_modules",
        "shardrec.distributed.types",
        "shardrec.distributed.embedding_types",
        "shardrec.distributed.embeddingbag",
        "shardrec.distributed.embedding",
        "shardrec.distributed.planner",
        "shardrec.distributed.planner.types",
        "shardrec.optim.keyed",
        "shardrec.optim.optimizers",
        "shardrec.distributed.model_parallel",
        "shardrec.distributed.dist_data",
        "shardrec.distributed.comm",
        "shardrec.models.dlrm",
        "shardrec.datasets",
        "shardrec.metrics",
    ]:
        assert required in listed, required


def test_import_as_torchrec_reads_like_the_tutorials() -> None:
    import torch

    import shardrec as torchrec

    ebc = torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name="product_table",
                embedding_dim=16,
                num_embeddings=4096,
                feature_names=["product"],
                pooling=torchrec.PoolingType.SUM,
            )
        ],
        device=torch.device("cpu"),
    )
    kjt = torchrec.KeyedJaggedTensor(
        keys=["product"],
        values=torch.tensor([101, 202, 303]),
        lengths=torch.tensor([2, 0, 1]),
    )
    pooled = ebc(kjt)
    weight = ebc.embedding_bags["product_table"].weight
    expected = torch.stack([weight[101] + weight[202], torch.zeros(16), weight[303]])
    torch.testing.assert_close(pooled.to_dict()["product"], expected)
