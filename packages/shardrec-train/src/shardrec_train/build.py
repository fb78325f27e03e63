"""Building the sharded model, in the order every rank runs it.

1. tables: one EmbeddingBagConfig per sparse feature of the dataset (`t_<feature>`); with
   `--raw-ids`, the raw-id features' tables are dynamic (shardrec_train.dynamic);
2. the model: an EmbeddingBagCollection on `meta` (no rank ever holds a whole table) inside
   DLRM or DLRM_DCN, wrapped in DLRMTrain (loss and detached outputs);
3. the plan: `EmbeddingShardingPlanner.collective_plan` (rank 0 plans, every rank receives
   it), or one forced sharding type with the planner's estimates added for the report;
4. DistributedModelParallel with the fused table optimizer, and the dense optimizer beside it
   in one CombinedOptimizer (checkpointed together).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import torch
from torch import nn

from shardrec_data import RecDataset
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_models import DLRM, DLRM_DCN, DLRMTrain
from shardrec_optim import (
    CombinedOptimizer,
    EmbOptimType,
    KeyedOptimizerWrapper,
    in_backward_optimizer_filter,
)
from shardrec_planner import (
    EmbeddingShardingPlanner,
    HostInfo,
    ShardingPlan,
    ShardingType,
    Topology,
    construct_module_sharding_plan,
    detect_host,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_train.dynamic import HashTrick, dynamic_table_configs
from shardrec_train.options import TrainOptions
from shardrec_train.sharding import forced_generators
from shardrec_train.tiered import (
    auto_tier,
    place_in_tier,
    store_dir,
    tier_constraints,
    tiered_names,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Built:
    """What the training loop needs."""

    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    plan: ShardingPlan
    remap: HashTrick | None = None
    """`--raw-ids --raw-id-tables hash`: maps each batch's raw ids to rows before the model
    (dynamic tables map their ids inside the sharded model)."""


def table_configs(dataset: RecDataset, embedding_dim: int) -> list[EmbeddingBagConfig]:
    """One table per sparse feature. Multi-hot features (genres) are mean-pooled, so that a
    sample with six genres does not get an embedding six times as long as one with one."""
    return [
        EmbeddingBagConfig(
            name=f"t_{f.name}",
            num_embeddings=f.num_embeddings,
            embedding_dim=embedding_dim,
            feature_names=[f.name],
            pooling=PoolingType.MEAN if f.multi_hot else PoolingType.SUM,
        )
        for f in dataset.sparse_features
    ]


def model_tables(
    opts: TrainOptions, dataset: RecDataset
) -> tuple[list[EmbeddingBagConfig], list[EmbeddingBagConfig]]:
    """(the model's table configs, the raw-id features' among them): raw-id features' tables
    have `--dynamic-capacity` rows and are dynamic unless `--raw-id-tables hash`
    (shardrec_train.dynamic)."""
    return dynamic_table_configs(
        table_configs(dataset, opts.embedding_dim), dataset.sparse_features, opts
    )


def build_model(
    opts: TrainOptions,
    dataset: RecDataset,
    device: torch.device,
    tables: list[EmbeddingBagConfig] | None = None,
) -> DLRMTrain:
    """DLRMTrain over DLRM / DLRM_DCN with its embedding tables on `meta` (`tables`: the
    configs, default `table_configs`)."""
    if tables is None:
        tables = table_configs(dataset, opts.embedding_dim)
    ebc = EmbeddingBagCollection(tables, device=torch.device("meta"))
    dlrm: DLRM
    if opts.model == "dlrm_dcn":
        dlrm = DLRM_DCN(
            embedding_bag_collection=ebc,
            dense_in_features=dataset.num_dense,
            dense_arch_layer_sizes=list(opts.dense_arch),
            over_arch_layer_sizes=list(opts.over_arch),
            dcn_num_layers=opts.dcn_num_layers,
            dcn_low_rank_dim=opts.dcn_low_rank_dim,
            dense_device=device,
        )
    else:
        dlrm = DLRM(
            embedding_bag_collection=ebc,
            dense_in_features=dataset.num_dense,
            dense_arch_layer_sizes=list(opts.dense_arch),
            over_arch_layer_sizes=list(opts.over_arch),
            dense_device=device,
        )
    dlrm.set_dense_precision(opts.dense_precision)
    return DLRMTrain(dlrm)


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bfloat16 natively on this CPU (avx512_bf16 / amx_bf16); False when
    torch cannot tell."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def dense_precision_note(precision: str, device: torch.device) -> str | None:
    """A line for the user when `--dense-precision bf16` will run emulated (a CPU without
    native bfloat16: correct, but slower than fp32), else None."""
    if precision != "bf16" or device.type != "cpu" or cpu_has_native_bf16():
        return None
    return (
        "shardrec train: --dense-precision bf16 on a CPU without native bfloat16 (no "
        "avx512_bf16 / amx_bf16): the dense part runs emulated, with the same numerics but "
        "slower than fp32; --dense-precision fp32 is the faster choice here"
    )


def build_raw_id_model(
    opts: TrainOptions, dataset: RecDataset, device: torch.device
) -> tuple[DLRMTrain, HashTrick | None]:
    """`build_model` with the raw-id features' tables (`--raw-ids`): dynamic tables (they map
    raw ids themselves, sharded or not), or with `--raw-id-tables hash` ordinary tables and
    the hash trick that maps the ids in front of the model (None otherwise)."""
    tables, raw = model_tables(opts, dataset)
    model = build_model(opts, dataset, device, tables)
    if raw and opts.raw_id_tables == "hash":
        return model, HashTrick(raw)
    return model, None


def ebc_path(model: nn.Module) -> str:
    """Module path of the model's one EmbeddingBagCollection."""
    paths: list[str] = [
        p for p, m in model.named_modules() if isinstance(m, EmbeddingBagCollection)
    ]
    assert len(paths) == 1, f"expected one EmbeddingBagCollection, found {paths}"
    return paths[0]


def make_sharder(opts: TrainOptions) -> EmbeddingBagCollectionSharder:
    return EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType(opts.optimizer), "learning_rate": opts.embedding_lr}
    )


def make_plan(
    opts: TrainOptions,
    model: nn.Module,
    sharder: EmbeddingBagCollectionSharder,
    *,
    world_size: int,
    local_world_size: int,
    device: torch.device,
    pg: torch.distributed.ProcessGroup | None,
) -> ShardingPlan:
    """The planner's plan, or every table with `--sharding-type` (costed by the planner);
    `--tiered` tables on the key_value kernel (shardrec_train.tiered)."""
    host = None
    if opts.host_memory_gib is not None and device.type == "cpu":
        host = HostInfo(
            memory_bytes=int(opts.host_memory_gib * 1024**3),
            cores=detect_host().cores,
            source="--host-memory-gib",
        )
    path = ebc_path(model)
    ebc = model.get_submodule(path)
    assert isinstance(ebc, EmbeddingBagCollection)
    names = [c.name for c in ebc.embedding_bag_configs()]
    tables = [(c.name, c.num_embeddings) for c in ebc.embedding_bag_configs()]
    planner = EmbeddingShardingPlanner(
        Topology(
            world_size=world_size,
            compute_device=device.type,
            local_world_size=local_world_size,
            host=host,
        ),
        batch_size=opts.batch_size,
        constraints=tier_constraints(opts, tables),  # --tiered (shardrec_train.tiered)
        # Tables that do not fit in the ranks' memory go to the disk tier on their own (cpu;
        # raw-id tables have no dense tier): the planner keeps every table in memory while
        # the model fits, so a run that fits plans as before.
        auto_tier=auto_tier(opts, device),
        tier_store_dir=str(store_dir(opts)),
    )
    if opts.sharding_type is None:
        plan = planner.collective_plan(model, [sharder], pg)
        return place_in_tier(opts, plan, tiered_names(opts, tables))
    module_plan = construct_module_sharding_plan(
        ebc,
        forced_generators(ShardingType(opts.sharding_type), names, world_size, local_world_size),
        world_size=world_size,
        local_world_size=local_world_size,
        device_type=device.type,
        sharder=sharder,
    )
    # Deterministic on every rank: no collective needed for a forced plan.
    plan = place_in_tier(opts, ShardingPlan(plan={path: module_plan}), tiered_names(opts, tables))
    return planner.estimate(model, [sharder], plan)


def dense_optimizer_factory(
    opts: TrainOptions,
) -> Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]:
    lr = opts.learning_rate

    def make(params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
        if opts.dense_optimizer == "adagrad":
            return torch.optim.Adagrad(list(params), lr=lr)
        if opts.dense_optimizer == "sgd":
            return torch.optim.SGD(list(params), lr=lr)
        return torch.optim.Adam(list(params), lr=lr)

    return make


def build(
    opts: TrainOptions,
    dataset: RecDataset,
    *,
    device: torch.device,
    world_size: int,
    local_world_size: int,
    pg: torch.distributed.ProcessGroup | None,
) -> Built:
    """The four steps of the module docstring."""
    # Same dense initial weights on every rank (DDP also broadcasts rank 0's at wrap time).
    torch.manual_seed(opts.seed)
    model, remap = build_raw_id_model(opts, dataset, device)
    sharder = make_sharder(opts)
    plan = make_plan(
        opts,
        model,
        sharder,
        world_size=world_size,
        local_world_size=local_world_size,
        device=device,
        pg=pg,
    )
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=[sharder])
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        dense_optimizer_factory(opts),
    )
    return Built(
        model=dmp,
        optimizer=CombinedOptimizer([dmp.fused_optimizer, dense]),
        plan=plan,
        remap=remap,
    )
