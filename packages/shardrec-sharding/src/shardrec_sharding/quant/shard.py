"""`shard_quant_model`: plan (forward only) and shard every quantized EBC and EC of a model."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shardrec_embedding import QuantEmbeddingBagCollection, QuantEmbeddingCollection
from shardrec_planner import (
    EmbeddingShardingPlanner,
    ParameterConstraints,
    ShardingPlan,
    Topology,
)
from shardrec_sharding.quant.embedding import ShardedQuantEmbeddingCollection
from shardrec_sharding.quant.embedding_bag import ShardedQuantEmbeddingBagCollection
from shardrec_sharding.quant.sharder import (
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
)

__all__ = ["shard_quant_model"]


def shard_quant_model(
    model: nn.Module,
    world_size: int = 1,
    compute_device: str = "cuda",
    sharding_device: str = "meta",
    constraints: Mapping[str, ParameterConstraints] | None = None,
    *,
    plan: ShardingPlan | None = None,
) -> tuple[nn.Module, ShardingPlan]:
    """Shard every `QuantEmbeddingBagCollection` and `QuantEmbeddingCollection` of `model` over
    `world_size` devices of this process; returns `(model, plan)` with the collections replaced
    (in place) by `ShardedQuantEmbeddingBagCollection` / `ShardedQuantEmbeddingCollection`
    (TorchRec's `torchrec.inference.modules` signature).

    compute_device: "cpu" puts every rank on the CPU (as TorchRec's CPU path does); "cuda"
    puts rank r on `cuda:r`. sharding_device is accepted for TorchRec compatibility: the
    quantized rows are sliced from the module, never materialized on another device first.
    constraints: table name -> ParameterConstraints (e.g. `sharding_types=["row_wise"]`).
    plan: a ready plan instead of the planner's (forward-only: no optimizer state is sized).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    device_type = str(compute_device).split(":")[0]
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"compute_device {compute_device!r} must be 'cpu' or 'cuda'")
    devices = [
        torch.device("cpu") if device_type == "cpu" else torch.device("cuda", r)
        for r in range(world_size)
    ]
    if plan is None:
        planner = EmbeddingShardingPlanner(
            topology=Topology(world_size=world_size, compute_device=device_type),
            constraints=constraints,
        )
        plan = planner.plan(
            model, [QuantEmbeddingBagCollectionSharder(), QuantEmbeddingCollectionSharder()]
        )
    if isinstance(model, _QUANT_COLLECTIONS):
        return _shard_one(model, "", plan, devices), plan
    for path, child in list(model.named_modules()):
        if isinstance(child, _QUANT_COLLECTIONS):
            parent_path, _, name = path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            setattr(parent, name, _shard_one(child, path, plan, devices))
    return model, plan


_QUANT_COLLECTIONS = (QuantEmbeddingBagCollection, QuantEmbeddingCollection)


def _shard_one(
    module: QuantEmbeddingBagCollection | QuantEmbeddingCollection,
    path: str,
    plan: ShardingPlan,
    devices: list[torch.device],
) -> ShardedQuantEmbeddingBagCollection | ShardedQuantEmbeddingCollection:
    entries = plan.get_plan_for_module(path)
    if entries is None:
        what = "the model (module path '')" if not path else f"module {path!r}"
        raise ValueError(f"the plan has no entry for {what}")
    if isinstance(module, QuantEmbeddingCollection):
        return ShardedQuantEmbeddingCollection(module, entries, devices)
    return ShardedQuantEmbeddingBagCollection(module, entries, devices)
