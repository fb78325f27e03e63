"""`ShardedEmbeddingCollection` and its sharder: per-id (sequence) embeddings, sharded.

Same structure as the sharded EmbeddingBagCollection (`embeddingbag`): tables split by sharding
type, one strategy per type (`registry.SEQUENCE_STRATEGIES`), three phases. Every id's row
returns to the rank that sent the id; the output is the unsharded module's
`{name: JaggedTensor}` in its order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import cast

from torch import Tensor, nn

from shardrec_collectives import Awaitable, LazyAwaitable
from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_planner import ParameterSharding
from shardrec_sharding._assembly import ShardedCollectionBase, TableSharder
from shardrec_sharding.registry import SEQUENCE_COMM_OPS, SEQUENCE_STRATEGIES
from shardrec_sharding.sharding_infos import EmbeddingShardingInfo, create_grouped_sharding_infos
from shardrec_sharding.types import SequenceInput, SequenceStrategy

__all__ = ["EmbeddingCollectionSharder", "ShardedEmbeddingCollection", "ShardedSequenceInput"]

_OWNER = "ShardedEmbeddingCollection"


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedSequenceInput:
    """The result of `input_dist`: one `SequenceInput` per strategy, and this rank's batch."""

    per_strategy: tuple[SequenceInput, ...]
    features: KeyedJaggedTensor


class ShardedEmbeddingCollection(ShardedCollectionBase[SequenceStrategy, EmbeddingCollection]):
    """An EmbeddingCollection whose tables are spread over the ranks of `env` by `plan`.

    Arguments as for `ShardedEmbeddingBagCollection`. `forward(features)` returns a
    `LazyAwaitable[dict[str, JaggedTensor]]` equal to the unsharded module's output;
    `state_dict()` keys are `embeddings.<table>.weight`. Column-split tables of one sharding
    type must share one column block width (one all-to-all returns all their rows).
    """

    _prefix = "embeddings"
    _owner = _OWNER
    _module_types = (EmbeddingCollection,)
    _registry = SEQUENCE_STRATEGIES
    _comm_ops = SEQUENCE_COMM_OPS
    embeddings: nn.ModuleDict

    def _read_module(self, module: EmbeddingCollection) -> list[EmbeddingConfig]:
        self._configs = module.embedding_configs()
        self._need_indices = module.need_indices()
        return self._configs

    @classmethod
    def create_grouped_sharding_infos(
        cls,
        module: EmbeddingCollection,
        table_name_to_parameter_sharding: Mapping[str, ParameterSharding],
        fused_params: Mapping[str, object] | None,
    ) -> dict[str, list[EmbeddingShardingInfo]]:
        """TorchRec's grouping of `module`'s tables by sharding type, with each table's merged
        fused params (`sharding_infos`); weights are `embeddings.<table>.weight`."""
        return create_grouped_sharding_infos(
            module,
            module.embedding_configs(),
            table_name_to_parameter_sharding,
            "embeddings.",
            fused_params,
        )

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedSequenceInput]:
        """Send every id to the ranks that hold its row; bad input raises on every rank."""
        kjt, pending = self._send_features(features)
        return Awaitable(
            lambda: ShardedSequenceInput(tuple(cast(SequenceInput, p.wait()) for p in pending), kjt)
        )

    def compute(self, dist_input: ShardedSequenceInput) -> list[Tensor]:
        """Local lookups: `(ids received, D)` rows per strategy."""
        return self._compute_agreed(dist_input.per_strategy)

    def output_dist(
        self, dist_input: ShardedSequenceInput, local: list[Tensor]
    ) -> LazyAwaitable[dict[str, JaggedTensor]]:
        """Rows back to the ranks of their ids, as the unsharded module's JaggedTensors."""
        pending = [
            s.output_dist(x, d)
            for s, x, d in zip(self._strategies, local, dist_input.per_strategy, strict=True)
        ]
        features = dist_input.features
        return LazyAwaitable(lambda: self._assemble([p.wait() for p in pending], features))

    def _assemble(
        self, parts: list[dict[int, Tensor]], features: KeyedJaggedTensor
    ) -> dict[str, JaggedTensor]:
        rows: dict[int, Tensor] = {}
        for p in parts:
            rows.update(p)
        per_feature = features.to_dict()
        out: dict[str, JaggedTensor] = {}
        for s in self._segments:
            jt = per_feature[s.feature]
            out[s.name] = JaggedTensor(
                values=rows[s.index],
                lengths=jt.lengths(),
                weights=jt.values() if self._need_indices else None,
            )
        return out

    def forward(self, features: KeyedJaggedTensor) -> LazyAwaitable[dict[str, JaggedTensor]]:
        """`output_dist(compute(input_dist(features)))`."""
        dist_input = self.input_dist(features).wait()
        return self.output_dist(dist_input, self.compute(dist_input))

    def embedding_configs(self) -> list[EmbeddingConfig]:
        return list(self._configs)

    def need_indices(self) -> bool:
        return self._need_indices


class EmbeddingCollectionSharder(TableSharder[EmbeddingCollection, ShardedEmbeddingCollection]):
    """Shards EmbeddingCollections; see `TableSharder`."""

    _modules = ShardedEmbeddingCollection._module_types
    _container = "embeddings"
    _sharding_types = tuple(SEQUENCE_STRATEGIES)
    _sharded = ShardedEmbeddingCollection
