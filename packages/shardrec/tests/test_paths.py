"""Every TorchRec-familiar path re-exports the component's own object, not a copy."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types

import pytest

import shardrec

# The TorchRec paths and their names: one row per umbrella module and the component module that
# defines the names (umbrella module, component, then the names); an indented line continues the
# names of the row above.
_EXPORTS = """
shardrec.test_utils  shardrec_testing  get_free_port skip_if_asan skip_if_asan_class seed_and_log
shardrec.optim.fused  shardrec_optim  EmptyFusedOptimizer FusedOptimizer FusedOptimizerModule
shardrec.quant.utils  shardrec_embedding.quant  meta_to_cpu_placement
shardrec.quant.embedding_modules  shardrec_embedding.quant
    MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS
shardrec.distributed.quant_embedding  shardrec_sharding  QuantEmbeddingCollectionSharder
    ShardedQuantEmbeddingCollection
shardrec.distributed.quant_embeddingbag  shardrec_sharding  QuantEmbeddingBagCollectionSharder
    ShardedQuantEmbeddingBagCollection
shardrec.fx  shardrec_jagged  Tracer symbolic_trace
shardrec.fx.tracer  shardrec_jagged  Tracer is_fx_tracing symbolic_trace
shardrec.models.dlrm  shardrec_models  DLRM DLRM_DCN DLRMTrain DenseArch InteractionArch
    InteractionDCNArch OverArch SparseArch DLRM_Projection DLRMWrapper InteractionProjectionArch
    choose
shardrec.modules.mlp  shardrec_models  MLP Perceptron
shardrec.modules.crossnet  shardrec_models  LowRankCrossNet CrossNet VectorCrossNet
    LowRankMixtureCrossNet
shardrec.datasets  shardrec_data  DATASET_NAMES SPLITS ArrayDataset Batch RecDataset SparseFeature
    SyntheticConfig SyntheticDataset load_dataset shard_indices
shardrec.metrics  shardrec_metrics  AUC NE Accuracy LogLoss MetricCollection RecMetric Throughput
    roc_auc
shardrec.distributed  shardrec_dmp  DistributedModelParallel TrainPipelineSparseDist
shardrec.distributed  shardrec_collectives  Awaitable NoWait ShardingEnv get_local_rank
    get_local_size
shardrec.distributed  shardrec_planner  ParameterSharding ModuleSharder
shardrec.distributed.train_pipeline  shardrec_dmp  TrainPipelineSparseDist Pipelineable
shardrec.distributed.train_pipeline  shardrec_dmp  TrainPipeline TrainPipelineBase
shardrec.distributed.train_pipeline.train_pipelines  shardrec_dmp  TrainPipeline TrainPipelineBase
    TrainPipelineSparseDist
shardrec.distributed.train_pipeline  shardrec_dmp  PrefetchTrainPipelineSparseDist
shardrec.distributed.train_pipeline.train_pipelines  shardrec_dmp  PrefetchTrainPipelineSparseDist
shardrec.distributed.shard  shardrec_dmp  shard_modules
shardrec.distributed.logging_handlers  shardrec_metrics.rec.events  EventLoggingHandler
    TorchrecComponent
shardrec.distributed.embedding_types  shardrec_planner  ShardingType
shardrec.distributed.types  torch.distributed._shard.sharded_tensor.api  ShardedTensor
shardrec.streamable  shardrec_dmp  Pipelineable
shardrec  shardrec_dmp  Pipelineable
shardrec.distributed.model_parallel  shardrec_dmp  DistributedModelParallel default_sharders
    DataParallelWrapper DefaultDataParallelWrapper get_module get_unwrapped_module
shardrec.distributed.model_parallel  shardrec_sharding  get_default_sharders
shardrec.distributed.planner.types  shardrec_planner  ShardingPlan
shardrec.inference.state_dict_transform  shardrec_dmp  state_dict_gather state_dict_to_device
shardrec  shardrec_jagged  JaggedTensor KeyedJaggedTensor KeyedTensor
shardrec  shardrec_embedding  DataType EmbeddingBagCollection EmbeddingBagConfig EmbeddingCollection
    EmbeddingConfig PoolingType
shardrec.sparse.jagged_tensor  shardrec_jagged  JaggedTensor KeyedJaggedTensor KeyedTensor
    jt_is_equal kjt_is_equal ComputeJTDictToKJT ComputeKJTToJTDict permute_multi_embedding
    regroup_kts
shardrec.sparse.jagged_tensor_validator  shardrec_jagged  validate_keyed_jagged_tensor
shardrec.sparse.jagged_tensor  shardrec_jagged.torchrec_private  _safe_tolist _all_keys_used_once
    _regroup_keyed_tensors _fbgemm_permute_pooled_embs _kt_regroup_arguments
shardrec.sparse.tensor_dict  shardrec_jagged.tensor_dict  maybe_td_to_kjt
shardrec.modules.feature_processor  shardrec_embedding  BaseGroupedFeatureProcessor
    PositionWeightedProcessor
shardrec.modules.embedding_configs  shardrec_embedding  BaseEmbeddingConfig DataType
    EmbeddingBagConfig EmbeddingConfig PoolingType data_type_to_dtype dtype_to_data_type
shardrec.modules.embedding_configs  shardrec_embedding.virtual  VirtualTableEvictionPolicy
    CountBasedEvictionPolicy CountTimestampMixedEvictionPolicy FeatureL2NormBasedEvictionPolicy
    FeatureScoreBasedEvictionPolicy FeatureScoreMapping NoEvictionPolicy
    TimestampBasedEvictionPolicy
shardrec.modules.embedding_modules  shardrec_embedding  EmbeddingBagCollection EmbeddingCollection
shardrec.modules.fused_embedding_modules  shardrec_embedding  FusedEmbeddingBagCollection
shardrec.modules.fused_embedding_modules  shardrec_embedding.fused  fuse_embedding_optimizer
shardrec.modules.feature_processor_  shardrec_embedding  PositionWeightedModule
    PositionWeightedModuleCollection FeatureProcessor FeatureProcessorsCollection
shardrec.modules.feature_processor  shardrec_embedding.dict_feature_processor
    BaseFeatureProcessor PositionWeightedModule
shardrec.modules.fp_embedding_modules  shardrec_embedding  FeatureProcessedEmbeddingBagCollection
    FeatureProcessorDictWrapper
shardrec.optim  shardrec_optim  CombinedOptimizer KeyedOptimizer KeyedOptimizerWrapper
    OptimizerWrapper WarmupOptimizer WarmupPolicy WarmupStage GradientClipping
    GradientClippingOptimizer RowWiseAdagrad SemisyncOptimizer
shardrec.optim.keyed  shardrec_optim  CombinedOptimizer KeyedOptimizer KeyedOptimizerWrapper
    OptimizerWrapper
shardrec.optim.optimizers  shardrec_optim  in_backward_optimizer_filter
shardrec.optim.apply_optimizer_in_backward  shardrec_optim  apply_optimizer_in_backward
shardrec.optim.warmup  shardrec_optim  WarmupOptimizer WarmupPolicy WarmupStage
shardrec.optim.clipping  shardrec_optim  GradientClipping GradientClippingOptimizer
shardrec.distributed  shardrec_sharding  EmbeddingBagCollectionSharder EmbeddingCollectionSharder
shardrec.distributed.types  shardrec_collectives  Awaitable LazyAwaitable LazyNoWait NoWait
    LazyGetItemMixin GetItemLazyAwaitable
    ShardingEnv
shardrec.distributed.types  shardrec_embedding  DataType
shardrec.distributed.types  shardrec_planner  ParameterSharding ShardingPlan ShardingType
    EnumerableShardingSpec ShardMetadata ModuleSharder EmbeddingModuleShardingPlan CacheParams
    CacheAlgorithm KeyValueParams BoundsCheckMode
shardrec.distributed.types  shardrec_planner.cache_stats  CacheStatistics
shardrec.distributed.embedding_types  shardrec_planner  EmbeddingComputeKernel
shardrec.distributed.planner.types  shardrec_planner  Perf Storage Shard ShardingOption
    PlannerErrorType ParameterConstraints PlannerError Topology
shardrec.distributed.planner.types  shardrec_planner.planner_types  PartitionByType DeviceHardware
shardrec.distributed.planner.types  shardrec_planner.shard_storage  PipelineType
shardrec.distributed.planner.types  shardrec_planner.enumerators  ShardEstimator
shardrec.distributed.planner.enumerators  shardrec_planner.enumerators  EmbeddingEnumerator
    ShardEstimator get_partition_by_type
shardrec.distributed.planner.shard_estimators  shardrec_planner.shard_perf  EmbeddingPerfEstimator
shardrec.distributed.planner.shard_estimators  shardrec_planner.shard_storage
    EmbeddingStorageEstimator PipelineType _calculate_cw_shard_io_sizes _calculate_dp_shard_io_sizes
    _calculate_rw_shard_io_sizes _calculate_shard_io_sizes _calculate_storage_specific_sizes
    _calculate_tw_shard_io_sizes _calculate_twrw_shard_io_sizes _get_optimizer_multipler
    calculate_pipeline_io_cost calculate_shard_storages
shardrec.distributed.planner.proposers  shardrec_planner.proposers  GreedyProposer
    GridSearchProposer Proposer DynamicProgrammingProposer UniformProposer _sharding_option_score
    proposers_to_proposals_list
shardrec.distributed.planner.types  shardrec_planner.proposers  Proposer
shardrec.distributed.planner.types  shardrec_planner.errors  InvalidValueError
shardrec.distributed.planner.partitioners  shardrec_planner.partitioners  GreedyPerfPartitioner
    MemoryBalancedPartitioner OrderedDeviceHardware ShardingOptionGroup SortBy set_hbm_per_device
shardrec.distributed.planner.shard_estimators  shardrec_planner.offload_stats  EmbeddingOffloadStats
    InvalidEstimateError _validate_io_sizes _validate_perf
shardrec.distributed.planner.constants  shardrec_planner.constants  kernel_bw_lookup
    BATCHED_COPY_PERF_FACTOR BATCH_SIZE BIGINT_DTYPE BWD_COMPUTE_MULTIPLIER CROSS_NODE_BANDWIDTH
    DDR_CAP DDR_MEM_BW DP_ELEMENTWISE_KERNELS_PERF_FACTOR FULL_BLOCK_EMB_DIM HALF_BLOCK_PENALTY
    HBM_CAP HBM_MEM_BW HBM_TO_DDR_MEM_BW HUNDRED_GB INTRA_NODE_BANDWIDTH MAX_SIZE MIN_CW_DIM
    NUM_POOLINGS POOLING_FACTOR QUARTER_BLOCK_PENALTY SSD_MEM_BW UVM_CACHING_RATIO
    WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER WEIGHTED_KERNEL_MULTIPLIER SSD_CAP
shardrec.distributed.planner.perf_models  shardrec_planner  NoopPerfModel NoopStorageModel
shardrec.distributed.planner.utils  shardrec_planner  BinarySearchPredicate LuusJaakolaSearch
shardrec.distributed.planner.utils  shardrec_planner.planner_utils  reset_shard_rank bytes_to_gb
    bytes_to_mb find_imbalance_tables gb_to_bytes mb_to_bytes prod sharder_name storage_repr_in_gb
shardrec.distributed.planner.utils  shardrec_planner.shard_metadata  placement
shardrec.distributed.planner.types  shardrec_planner.storage_reservations  StorageReservation
shardrec.distributed.planner.planners  shardrec_planner  EmbeddingShardingPlanner
shardrec.distributed.planner.planners  shardrec_planner.kernel_validation  validate_compute_kernels
shardrec.distributed.planner.stats  shardrec_planner.imbalance  chi_sq_divergence kl_divergence
    max_chi_sq_divergence max_kl_divergence normalize total_distance total_variation
shardrec.distributed.planner.storage_reservations  shardrec_planner  FixedAbsoluteStorageReservation
    FixedPercentageStorageReservation HeuristicalStorageReservation
shardrec.distributed.embeddingbag  shardrec_sharding  EmbeddingBagCollectionSharder
    ShardedEmbeddingBagCollection
shardrec.distributed.embedding  shardrec_sharding  EmbeddingCollectionSharder
    ShardedEmbeddingCollection
shardrec.distributed.sharding_plan  shardrec_planner  construct_module_sharding_plan column_wise
    data_parallel grid_shard row_wise table_column_wise table_row_wise table_wise
    ParameterShardingGenerator placement
shardrec.distributed.sharding_plan  shardrec_sharding  apply_to_all get_default_sharders
    get_module_to_default_sharders
shardrec.distributed.planner  shardrec_planner  EmbeddingShardingPlanner ParameterConstraints
    Topology
shardrec.distributed.dist_data  shardrec_collectives  EmbeddingsAllToOne EmbeddingsAllToOneReduce
    KJTAllToAll KJTAllToAllSplitsAwaitable KJTOneToAll PooledEmbeddingsAllGather
    PooledEmbeddingsAllToAll PooledEmbeddingsAwaitable PooledEmbeddingsReduceScatter
    SeqEmbeddingsAllToOne SequenceEmbeddingsAllToAll SequenceEmbeddingsAwaitable
    VariableBatchPooledEmbeddingsAllToAll VariableBatchPooledEmbeddingsReduceScatter
shardrec.distributed.test_utils.multi_process  shardrec_testing  MultiProcessContext
    MultiProcessTestBase
shardrec.distributed.comm  shardrec_collectives  get_group_rank get_local_rank get_local_size
    get_num_groups intra_and_cross_node_pg
shardrec.optim.rowwise_adagrad  shardrec_optim  RowWiseAdagrad
shardrec.optim.clipping  shardrec_optim.clipping  _batch_cal_norm _compute_total_norm _get_grads
shardrec.modules.regroup  shardrec_embedding  KTRegroupAsDict PermuteMultiEmbedding module_init
shardrec.modules.regroup  shardrec_embedding.regroup  _split_to_tensor_dict _to_tensor_dict
shardrec.types  shardrec_embedding  CacheMixin DataType
shardrec.ir  shardrec_embedding.ir  JsonSerializer SerializerInterface decapsulate_ir_modules
    encapsulate_ir_modules mark_dynamic_kjt qualname
shardrec.ir.serializer  shardrec_embedding.ir.serializer  EBCJsonSerializer ECJsonSerializer
    FPEBCJsonSerializer JsonSerializer KTRegroupAsDictJsonSerializer PWMCJsonSerializer
    PWMJsonSerializer QuantEBCJsonSerializer QuantECJsonSerializer ebc_meta_forward
    embedding_bag_config_to_metadata embedding_metadata_to_config get_deserialized_device
    kt_regroup_meta_forward
shardrec.ir.utils  shardrec_embedding.ir.utils  DEFAULT_SERIALIZER_CLS decapsulate_ir_modules
    encapsulate_ir_modules mark_dynamic_kjt move_to_copy_nodes_to_device
    prune_pytree_flatten_unflatten qualname
shardrec.ir.types  shardrec_embedding.ir.types  SerializerInterface
shardrec.ir.schema  shardrec_embedding.ir.schema  EBCMetadata ECMetadata EmbeddingBagConfigMetadata
    EmbeddingConfigMetadata FPEBCMetadata KTRegroupAsDictMetadata
    PositionWeightedModuleCollectionMetadata PositionWeightedModuleMetadata QuantEBCMetadata
    QuantECMetadata
shardrec.modules.activation  shardrec_models  SwishLayerNorm
shardrec.modules.deepfm  shardrec_models  DeepFM FactorizationMachine
shardrec.modules.embedding_tower  shardrec_embedding  EmbeddingTower EmbeddingTowerCollection
    tower_input_params
shardrec.models.deepfm  shardrec_models.deepfm_nn  DenseArch OverArch SparseArch
shardrec.models.experimental.transformerdlrm  shardrec_models.dlrm  DLRM_Transformer
shardrec.models.experimental.transformerdlrm  shardrec_models.arches  InteractionTransformerArch
shardrec.models.deepfm  shardrec_models  FMInteractionArch SimpleDeepFMNN SimpleDeepFMNNWrapper
shardrec.modules.lazy_extension  shardrec_models  LazyModuleExtensionMixin lazy_apply
shardrec.modules.utils  shardrec_embedding.module_utils  check_module_output_dimension
    construct_jagged_tensors construct_modulelist_from_single_module
    convert_list_of_modules_to_modulelist deterministic_dedup extract_module_or_tensor_callable
    get_module_output_dimension init_mlp_weights_xavier_uniform
shardrec.optim.semi_sync  shardrec_optim  SemisyncOptimizer
shardrec.optim.semi_sync  shardrec_optim.semi_sync  SEMISYNC_GLOBAL_STEP_COUNTER_KEY
    SEMISYNC_LOCAL_STEP_COUNTER_KEY SEMI_SYNC_GLOBAL_OPTIM_KEY SEMI_SYNC_GLOBAL_STATE_KEY
    SEMI_SYNC_LOCAL_OPTIM_KEY SEMI_SYNC_LOCAL_STATE_KEY
shardrec.distributed.types  shardrec_planner.shard_storage  PipelineType StorageUsageType
    compute_storage_usage get_tensor_size_bytes
shardrec.distributed.types  shardrec_planner.cache_params  MultiPassPrefetchConfig
shardrec.distributed.embeddingbag  shardrec_embedding  EmbeddingBagCollection
shardrec.distributed.planner.constants  shardrec_planner.perf_estimator_factory
    DEFAULT_PERF_ESTIMATOR
shardrec.distributed.planner.estimator  shardrec_planner.perf_estimator_factory
    DEFAULT_PERF_ESTIMATOR EmbeddingPerfEstimatorFactory
shardrec.distributed.planner.estimator  shardrec_planner.shard_perf  EmbeddingPerfEstimator
shardrec.distributed.logger  shardrec_planner.topology_factory  static_logger
shardrec.distributed.planner.stats  shardrec_planner.embedding_stats  EmbeddingStats
    NoopEmbeddingStats
shardrec.distributed.planner.planners  shardrec_planner.pluggable  extract_plan
    validate_modules_inclusion_in_sharding_plan
shardrec.distributed.planner.types  shardrec_planner.pluggable  PlanLoader
shardrec.distributed.planner.proposers  shardrec_planner.offload_scaleup
    EmbeddingOffloadScaleupProposer
shardrec.distributed.utils  shardrec_planner.optional  none_throws
shardrec.distributed.utils  shardrec_sharding  add_params_from_parameter_sharding merge_fused_params
shardrec.distributed.utils  shardrec_dmp  get_unsharded_module_names
shardrec.distributed.planner.types  shardrec_planner.topology_parts  BasicCommsBandwidths
    CollectiveType CustomTopologyData GeneralizedCommsBandwidth
shardrec.distributed.planner.types  shardrec_planner.topology_factory  HardwareConfig KernelConfig
    TrainerConfig TopologyConfigBase TopologyFactory
shardrec.distributed.planner.types  shardrec_planner.sharder_data  SharderData
shardrec.distributed.planner.types  shardrec_planner.hashing  hash_planner_context_inputs
    hash_planner_context_inputs_str hash_sha256_str hash_sha256_to_int round_to_nearest
shardrec.distributed.types  shardrec_planner.sharder_data  StorageUsageType
shardrec.distributed.embedding_types  shardrec_planner.sharder_data  BaseEmbeddingSharder
    BaseQuantEmbeddingSharder
shardrec.distributed.planner.utils  shardrec_planner.sharder_data  build_sharder_data
    build_sharder_data_map
shardrec.modules.mc_modules  shardrec_embedding.mc  DistanceLFU_EvictionPolicy LFU_EvictionPolicy
    LRU_EvictionPolicy MCHEvictionPolicy MCHEvictionPolicyMetadataInfo MCHManagedCollisionModule
    ManagedCollisionCollection ManagedCollisionModule apply_mc_method_to_jt_dict
    average_threshold_filter dynamic_threshold_filter probabilistic_threshold_filter
shardrec.modules.mc_embedding_modules  shardrec_embedding.mc
    BaseManagedCollisionEmbeddingCollection ManagedCollisionCollection
    ManagedCollisionEmbeddingBagCollection ManagedCollisionEmbeddingCollection
shardrec.modules.hash_mc_modules  shardrec_embedding.mc  HashZchManagedCollisionModule
shardrec.modules.hash_mc_evictions  shardrec_embedding.mc  HashZchEvictionConfig
    HashZchEvictionPolicyName HashZchEvictionScorer HashZchPerFeatureTtlScorer
    HashZchSingleTtlScorer get_eviction_scorer
shardrec.modules.hash_mc_metrics  shardrec_embedding.mc  ScalarLogger
shardrec.modules.mc_adapter  shardrec_embedding.mc  McEmbeddingBagCollectionAdapter
    McEmbeddingCollectionAdapter
shardrec.distributed.mc_modules  shardrec_sharding.mc  ManagedCollisionCollectionSharder
    ShardedManagedCollisionCollection
shardrec.distributed.mc_embeddingbag  shardrec_sharding.mc
    ManagedCollisionEmbeddingBagCollectionSharder ShardedManagedCollisionEmbeddingBagCollection
shardrec.distributed.embedding_sharding  shardrec_sharding  EmbeddingShardingInfo
shardrec.distributed.embedding_sharding  shardrec_sharding.bucketize  bucketize_kjt_before_all2all
shardrec.distributed.mc_embedding  shardrec_sharding.mc  ManagedCollisionEmbeddingCollectionSharder
    ShardedManagedCollisionEmbeddingCollection
shardrec.distributed.mc_embedding_modules  shardrec_sharding.mc
    BaseManagedCollisionEmbeddingCollectionSharder
shardrec.distributed.fbgemm_qcomm_codec  shardrec_collectives.qcomm  CommType QCommsConfig
    QuantizationContext QuantizedCommCodec get_qcomm_codecs get_qcomm_codecs_registry
shardrec.distributed.types  shardrec_collectives.qcomm  CommOp NoOpQuantizedCommCodec
    QuantizationContext QuantizedCommCodec QuantizedCommCodecs
"""


def _rows(table: str) -> list[tuple[str, str, str]]:
    """(umbrella module, name, component) for every name of `table` (layout: above)."""
    rows: list[tuple[str, str, list[str]]] = []
    for line in table.strip("\n").splitlines():
        if line.startswith(" "):
            rows[-1][2].extend(line.split())
        else:
            path, component, *names = line.split()
            rows.append((path, component, names))
    return [(path, n, component) for path, component, names in rows for n in names]


PATHS = _rows(_EXPORTS)


def _names_of(component: str, path: str) -> list[tuple[str, str, str]]:
    """Every name of `path`'s `__all__`, defined (or re-exported) by `component`."""
    return [(path, n, component) for n in importlib.import_module(path).__all__]


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


def test_collective_utils_is_the_component_module() -> None:
    """TorchRec's tests set `collective_utils._INITIALIZED`: the path is the module itself."""
    import shardrec.distributed.collective_utils as umbrella
    import shardrec_collectives.collective_utils as component

    assert umbrella is component
    for name in ("is_leader", "invoke_on_rank_and_broadcast_result", "run_on_leader",
                 "create_on_rank_and_share_result", "init_collective_validation",
                 "validate_collectives_enabled", "_resolve_enablement_on_leader"):  # fmt: skip
        assert callable(getattr(umbrella, name)), name
