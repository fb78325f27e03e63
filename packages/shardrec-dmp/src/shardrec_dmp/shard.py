"""`shard_modules`: replace a model's embedding modules by their sharded versions, in place.

TorchRec's composable alternative to `DistributedModelParallel`: the same plan and sharders, the
same sharded modules, but no wrapper and no data-parallel wrapping of the dense part (the caller
replicates it, e.g. with `DistributedDataParallel`, if it wants to). The model keeps its own
names; the returned module is the model itself, or the sharded module when the model is
itself an embedding module.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp.model_parallel import (
    _default_env,
    _materialize_dense,
    _move_dense,
    default_sharders,
    make_plan,
    shard_planned,
)
from shardrec_planner import PlannerSharder, ShardingPlan

__all__ = ["shard_modules"]


def shard_modules(
    module: nn.Module,
    env: ShardingEnv | None = None,
    device: torch.device | str | None = None,
    plan: ShardingPlan | None = None,
    sharders: Sequence[PlannerSharder] | None = None,
    init_params: bool = False,
) -> nn.Module:
    """Shard every planned embedding module of `module` (a collective when planning).

    Args:
        module: the model; its embedding modules may be on `meta`.
        env: the sharding environment; default the default process group.
        device: the compute device; default CPU (as TorchRec).
        plan: default `EmbeddingShardingPlanner(...).collective_plan(module, sharders)`.
        sharders: default one per shardable module type (`default_sharders()`).
        init_params: materialize the other (`meta`) parameters and buffers on `device` and move
            the rest of the model there (not when `device` is `meta`).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"shard_modules shards an nn.Module, got {type(module).__name__}")
    dev = torch.device("cpu") if device is None else torch.device(device)
    environment = _default_env(dev) if env is None else env
    chosen = list(default_sharders() if sharders is None else sharders)
    chosen_plan = make_plan(module, plan, environment, dev, chosen)
    root, sharded = shard_planned(module, chosen_plan, environment, dev, chosen)
    if init_params and dev.type != "meta":
        _materialize_dense(root, set(sharded), dev)
        _move_dense(root, set(sharded), dev)
    return root
