"""What every sharded collection builds from (module, plan, env): its local lookups and their state.

`ShardedEmbeddingBagCollection` and `ShardedEmbeddingCollection` differ in their strategies and
forward, not in how they are put together: check the plan, take each table's weight (unless the
module is on `meta`) and fused optimizer, let each sharding type's strategy build its lookups,
and expose the local tables under the unsharded module's names with a sharded state_dict and
one fused optimizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_embedding import BaseEmbeddingConfig
from shardrec_optim import FusedOptimSpec
from shardrec_planner import ParameterSharding, ShardingType
from shardrec_sharding.fused_optimizer import ShardedFusedOptimizer
from shardrec_sharding.layout import LocalTable, TableSharding, check_plan
from shardrec_sharding.lookup import LookupTable
from shardrec_sharding.state_dict import ShardedStateDict
from shardrec_sharding.types import PooledStrategy, SequenceStrategy, TableMaker

__all__ = ["ShardedParts", "assemble"]

S = TypeVar("S", PooledStrategy, SequenceStrategy)
Builder = Callable[[Sequence[TableSharding], ShardingEnv, TableMaker], S]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ShardedParts(Generic[S]):
    """The pieces a sharded collection keeps; `modules` holds this rank's local tables."""

    tables: list[TableSharding]
    strategies: list[S]
    modules: nn.ModuleDict
    state: ShardedStateDict
    fused_optimizer: ShardedFusedOptimizer


def assemble(
    *,
    configs: Sequence[BaseEmbeddingConfig],
    plan: Mapping[str, ParameterSharding],
    env: ShardingEnv,
    weights: Mapping[str, Tensor],
    optimizer_of: Callable[[Tensor], FusedOptimSpec],
    registry: Mapping[
        ShardingType, Callable[[Sequence[TableSharding], ShardingEnv, TableMaker], S]
    ],
    prefix: str,
) -> ShardedParts[S]:
    """Build the local lookups of `configs` under `plan` on `env`.

    weights: each table's unsharded weight (on `meta` when the module was never materialized:
    then each shard is initialized from its table config instead). optimizer_of: a fused
    table's optimizer, given its weight. prefix: the module's table container name
    (`embedding_bags` or `embeddings`), which keys the state_dict.
    """
    tables = check_plan(configs, plan, env.world_size, list(registry))
    full: dict[str, Tensor | None] = {}
    optimizers: dict[str, FusedOptimSpec] = {}
    for t in tables:
        weight = weights[t.name]
        full[t.name] = None if weight.device.type == "meta" else weight.detach()
        if t.fused:
            optimizers[t.name] = optimizer_of(weight)

    def make_table(table: TableSharding, local: LocalTable) -> LookupTable:
        weight = full[table.name]
        return LookupTable(
            local=local,
            weight=None if weight is None else local.slice_of(weight),
            init_fn=table.config.init_weight_,
            optimizer=optimizers.get(table.name),
        )

    strategies: list[S] = []
    for sharding_type, build in registry.items():
        chosen = [t for t in tables if t.sharding_type is sharding_type]
        if chosen:
            strategies.append(build(chosen, env, make_table))
    by_name: dict[str, nn.Module] = {}
    for s in strategies:
        by_name.update(s.lookup.table_modules())
    state = ShardedStateDict(tables, env, prefix)
    return ShardedParts(
        tables=tables,
        strategies=strategies,
        # Registered under the unsharded module's names, so `named_parameters()` and the
        # state_dict keys match it; the lookups themselves are not submodules.
        modules=nn.ModuleDict({c.name: by_name[c.name] for c in configs if c.name in by_name}),
        state=state,
        fused_optimizer=ShardedFusedOptimizer(
            [(prefix, m.fused_optimizer) for s in strategies for m in s.lookup.fused_modules()],
            state,
        ),
    )
