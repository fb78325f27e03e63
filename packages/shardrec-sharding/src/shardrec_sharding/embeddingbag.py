"""`ShardedEmbeddingBagCollection` and its sharder.

The collection splits its tables by sharding type, hands each type's tables to that type's
strategy (`registry`), and runs the strategies' phases side by side:

```
features --input_dist--> [DistInput per strategy] --compute--> [local pooled per strategy]
         --output_dist--> [(B, w) blocks per strategy] --block copies in key order--> KeyedTensor
```

The output has the unsharded module's keys in its order (TorchRec 1.8 orders them by sharding
group instead) and its values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import cast

from torch import Tensor, nn

from shardrec_collectives import Awaitable, LazyAwaitable
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_planner import ParameterSharding
from shardrec_sharding._assembly import (
    DEFAULT_FUSED_OPTIMIZER,
    ShardedCollectionBase,
    TableSharder,
    table_optimizer,
)
from shardrec_sharding._columns import ColumnPlacement
from shardrec_sharding.registry import POOLED_COMM_OPS, POOLED_STRATEGIES
from shardrec_sharding.sharding_infos import EmbeddingShardingInfo, create_grouped_sharding_infos
from shardrec_sharding.types import DistInput, PooledStrategy

__all__ = [
    "DEFAULT_FUSED_OPTIMIZER",
    "EmbeddingBagCollectionSharder",
    "ShardedEmbeddingBagCollection",
    "ShardedInput",
    "table_optimizer",
]

_OWNER = "ShardedEmbeddingBagCollection"

PooledModule = EmbeddingBagCollection | FusedEmbeddingBagCollection


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedInput:
    """The result of `input_dist`: one `DistInput` per strategy, in strategy order."""

    per_strategy: tuple[DistInput, ...]
    batch_size: int


class ShardedEmbeddingBagCollection(ShardedCollectionBase[PooledStrategy, PooledModule]):
    """An EmbeddingBagCollection whose tables are spread over the ranks of `env` by `plan`.

    Args:
        module: the EmbeddingBagCollection (or FusedEmbeddingBagCollection) to shard. A
            materialized module keeps its weights (each rank copies its shards); one on `meta`
            is initialized shard by shard with each table's init, never a whole table.
        plan: table name -> ParameterSharding (every table exactly once).
        env: the ranks. device: where local shards live (default `env.device`).
        fused_params: TorchRec-style optimizer settings for fused tables (see
            `table_optimizer` for the order of precedence).

    `forward(features)` returns a `LazyAwaitable[KeyedTensor]` equal to the unsharded
    module's output for this rank's batch (batch sizes may differ between ranks; a batch with a
    variable batch size per feature and `inverse_indices` gives the output of its expansion).
    `state_dict()` keys are the unsharded module's (`embedding_bags.<table>.weight`); sharded
    tables appear as `ShardedTensor`s.
    """

    _prefix = "embedding_bags"
    _owner = _OWNER
    _module_types = (EmbeddingBagCollection, FusedEmbeddingBagCollection)
    _registry = POOLED_STRATEGIES
    _comm_ops = POOLED_COMM_OPS
    embedding_bags: nn.ModuleDict

    def _read_module(self, module: PooledModule) -> list[EmbeddingBagConfig]:
        self._configs = module.embedding_bag_configs()
        self._is_weighted = module.is_weighted()
        return self._configs

    def _built(self) -> None:
        self._placement = ColumnPlacement(
            [s.output_blocks for s in self._strategies],
            [s.segment_columns for s in self._strategies],
            [(seg.index, seg.dim) for seg in self._segments],
        )

    @classmethod
    def create_grouped_sharding_infos(
        cls,
        module: PooledModule,
        table_name_to_parameter_sharding: Mapping[str, ParameterSharding],
        prefix: str,
        fused_params: Mapping[str, object] | None,
        suffix: str | None = "weight",
    ) -> dict[str, list[EmbeddingShardingInfo]]:
        """TorchRec's grouping of `module`'s tables by sharding type, with each table's merged
        fused params (`sharding_infos`); weights are `prefix + table (+ .suffix)`."""
        return create_grouped_sharding_infos(
            module,
            module.embedding_bag_configs(),
            table_name_to_parameter_sharding,
            prefix,
            fused_params,
            suffix,
        )

    # -- the three phases --------------------------------------------------------------------

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedInput]:
        """Send every id to the ranks that hold its rows (one exchange per sharding type).

        Bad input (wrong type or weights, missing feature, id out of range) raises on this rank
        and a `PeerError` on every other rank, no ids moved: at the call when the first sharding
        type is data_parallel, else at `wait()` (the exchanges are read there, so that the
        pipeline's next input dist travels under the current batch's compute).
        """
        kjt, pending = self._send_features(features)
        batch = kjt.stride()
        return Awaitable(
            lambda: ShardedInput(tuple(cast(DistInput, p.wait()) for p in pending), batch)
        )

    def compute(self, dist_input: ShardedInput) -> list[Tensor]:
        """Local lookups: one `(rows of the received batch, local dims)` tensor per strategy."""
        return self._compute_agreed(dist_input.per_strategy)

    def output_dist(
        self, dist_input: ShardedInput, local: list[Tensor]
    ) -> LazyAwaitable[KeyedTensor]:
        """Pooled rows back to the ranks of their samples, assembled in the module's order."""
        pending = [
            s.output_dist(x, d)
            for s, x, d in zip(self._strategies, local, dist_input.per_strategy, strict=True)
        ]
        batch = dist_input.batch_size
        return LazyAwaitable(lambda: self._assemble([p.wait() for p in pending], batch))

    def _assemble(self, parts: list[Tensor], batch: int) -> KeyedTensor:
        return KeyedTensor(
            keys=[s.name for s in self._segments],
            length_per_key=[s.dim for s in self._segments],
            values=self._placement(parts, batch),
        )

    def forward(self, features: KeyedJaggedTensor) -> LazyAwaitable[KeyedTensor]:
        """`output_dist(compute(input_dist(features)))`: `KeyedTensor (B, sum of dims)`."""
        dist_input = self.input_dist(features).wait()
        return self.output_dist(dist_input, self.compute(dist_input))

    # -- the rest of the EmbeddingBagCollection surface ---------------------------------------

    def is_weighted(self) -> bool:
        return self._is_weighted

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return list(self._configs)

    def embedding_names(self) -> list[str]:
        return [s.name for s in self._segments]

    def extra_repr(self) -> str:
        kinds = ", ".join(
            f"{st.sharding_type.value}: "
            f"{[t.name for t in self._tables if t.sharding_type is st.sharding_type]}"
            for st in self._strategies
        )
        return f"rank={self.env.rank}/{self.env.world_size}, {kinds}"


class EmbeddingBagCollectionSharder(TableSharder[PooledModule, ShardedEmbeddingBagCollection]):
    """Shards EmbeddingBagCollections (and FusedEmbeddingBagCollections); see `TableSharder`."""

    _modules = ShardedEmbeddingBagCollection._module_types
    _container = "embedding_bags"
    _sharding_types = tuple(POOLED_STRATEGIES)
    _sharded = ShardedEmbeddingBagCollection
