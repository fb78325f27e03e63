"""What the sharded quantized-comms tests share (test_qcomm_sharded*.py): the registries they
train with, each codec's relative bound, seeded tables and the gradient of the loss with
|coefficients| (which bounds what the backward codec changes in a table after linear-loss SGD)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from _sharding_placements import generator_for
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_collectives.qcomm import CommType, QCommsConfig, get_qcomm_codecs_registry
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan
from shardrec_testing import RankContext, seeded_generator

CONFIGS = {
    "bf16/fp16": QCommsConfig(forward_precision=CommType.BF16, backward_precision=CommType.FP16),
    "int8/bf16": QCommsConfig(forward_precision=CommType.INT8, backward_precision=CommType.BF16),
}
REL = {CommType.BF16: 2.0**-8, CommType.FP16: 2.0**-11}


def fill(tables: nn.ModuleDict, shapes: Sequence[tuple[str, int, int]], seed: str) -> None:
    """Every table `(name, rows, dim)` of `tables` gets seeded randn weights."""
    g = seeded_generator(seed)
    with torch.no_grad():
        for name, rows, dim in shapes:
            tables[name].weight.copy_(torch.randn(rows, dim, generator=g))


def abs_gradients(
    module: nn.Module,
    tables: nn.ModuleDict,
    batches: Sequence[tuple[KeyedJaggedTensor, torch.Tensor]],
    values: Callable[[object], torch.Tensor],
) -> dict[str, torch.Tensor]:
    """Per table name, the gradient of sum(|coefficients| * values(module(kjt))) over `batches`
    (every rank's, every step)."""
    for kjt, coefficients in batches:
        (values(module(kjt)) * coefficients.abs()).sum().backward()
    return {name: t.weight.grad.clone() for name, t in tables.items()}  # type: ignore[union-attr]


def shard(
    ctx: RankContext,
    sharder_type: Callable[..., object],
    module: nn.Module,
    kinds: Sequence[tuple[str, str]],
    name: str | None,
    lr: float,
) -> nn.Module:
    """`module` sharded on `ctx`'s ranks (table `(name, sharding type)` of `kinds`) by
    `sharder_type` with fused exact SGD at `lr` and the registry of CONFIGS[name] (None:
    exact)."""
    registry = None if name is None else get_qcomm_codecs_registry(CONFIGS[name])
    sharder = sharder_type(
        fused_params={"optimizer": "exact_sgd", "learning_rate": lr},
        qcomm_codecs_registry=registry,
    )
    assert sharder.qcomm_codecs_registry == registry  # type: ignore[attr-defined]
    plan = construct_module_sharding_plan(
        module,
        {n: generator_for(kind, i, ctx.world_size) for i, (n, kind) in enumerate(kinds)},
        world_size=ctx.world_size,
    )
    sharded: nn.Module = sharder.shard(module, plan, ShardingEnv.from_process_group(ctx.pg))  # type: ignore[attr-defined]
    return sharded
