"""`ShardedEmbeddingCollection` and its sharder: per-id (sequence) embeddings, sharded.

Same structure as the sharded EmbeddingBagCollection (`embeddingbag`): tables split by sharding
type, one strategy per type (`registry.SEQUENCE_STRATEGIES`), three phases. Every id's row
returns to the rank that sent the id; the output is the unsharded module's
`{name: JaggedTensor}` in its order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from shardrec_collectives import Awaitable, LazyAwaitable, ShardingEnv, agree_on_error
from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_optim import FusedOptimSpec
from shardrec_planner import EmbeddingComputeKernel, ParameterSharding, ShardingType
from shardrec_sharding._assembly import assemble
from shardrec_sharding.checks import FeatureChecker
from shardrec_sharding.embeddingbag import table_optimizer
from shardrec_sharding.fused_optimizer import ShardedFusedOptimizer
from shardrec_sharding.layout import segments_of
from shardrec_sharding.registry import SEQUENCE_STRATEGIES
from shardrec_sharding.strategies._kjt import expand_variable_batch
from shardrec_sharding.types import SequenceInput, SequenceStrategy

__all__ = ["EmbeddingCollectionSharder", "ShardedEmbeddingCollection", "ShardedSequenceInput"]

_OWNER = "ShardedEmbeddingCollection"


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedSequenceInput:
    """The result of `input_dist`: one `SequenceInput` per strategy, and this rank's batch."""

    per_strategy: tuple[SequenceInput, ...]
    features: KeyedJaggedTensor


class ShardedEmbeddingCollection(nn.Module):
    """An EmbeddingCollection whose tables are spread over the ranks of `env` by `plan`.

    Arguments as for `ShardedEmbeddingBagCollection`. `forward(features)` returns a
    `LazyAwaitable[dict[str, JaggedTensor]]` equal to the unsharded module's output;
    `state_dict()` keys are `embeddings.<table>.weight`. Column-split tables of one sharding
    type must share one column block width (one all-to-all returns all their rows).
    """

    def __init__(
        self,
        module: EmbeddingCollection,
        plan: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
        fused_params: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, EmbeddingCollection):
            raise TypeError(f"{_OWNER} shards an EmbeddingCollection, got {type(module).__name__}")
        configs: list[EmbeddingConfig] = module.embedding_configs()
        if device is not None and torch.device(device) != env.device:
            env = dataclasses.replace(env, device=torch.device(device))
        self.env = env
        self._configs = configs
        self._need_indices = module.need_indices()
        self._segments = segments_of(configs)
        weights: dict[str, Tensor] = {}
        for c in configs:
            weight = module.embeddings[c.name].weight
            assert isinstance(weight, Tensor)
            weights[c.name] = weight
        parts = assemble(
            configs=configs,
            plan=plan,
            env=env,
            weights=weights,
            optimizer_of=lambda w: table_optimizer(module, w, fused_params),
            registry=SEQUENCE_STRATEGIES,
            prefix="embeddings",
        )
        self._tables = parts.tables
        self._strategies: list[SequenceStrategy] = parts.strategies
        self.embeddings = parts.modules
        self._state = parts.state
        self._fused_optimizer = parts.fused_optimizer
        self._checker = FeatureChecker(
            self._segments,
            {c.name: c.num_embeddings for c in configs},
            weighted=False,
            owner=_OWNER,
        )
        # Both are untyped in torch's stubs.
        self._register_state_dict_hook(self._state.to_sharded)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(self._state.to_local)  # type: ignore[no-untyped-call]

    @property
    def _input_dists(self) -> dict[str, object]:
        """Sharding type -> its input distribution (ids to the ranks that own their rows)."""
        return {str(s.sharding_type): s.input_dist for s in self._strategies}

    @property
    def _lookups(self) -> dict[str, object]:
        """Sharding type -> its table-batched lookup over this rank's shards."""
        return {str(s.sharding_type): s.lookup for s in self._strategies}

    @property
    def _output_dists(self) -> dict[str, object]:
        """Sharding type -> its output distribution (embeddings back to the ids' rank)."""
        return {str(s.sharding_type): s.output_dist for s in self._strategies}

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedSequenceInput]:
        """Send every id to the ranks that hold its row; bad input raises on every rank."""
        error = self._checker.check(features)
        if not isinstance(features, KeyedJaggedTensor):  # error is set: send nothing
            features = KeyedJaggedTensor(
                [],
                torch.empty(0, dtype=torch.int64),
                lengths=torch.empty(0, dtype=torch.int32),
                stride=0,
            )
        elif features.variable_stride_per_key() and error is None:
            features = expand_variable_batch(features)
        if not self._strategies[0].carries_errors:
            agree_on_error(self.env, error)
            error = None
        positions = {} if error is not None else self._checker.feature_positions(features)
        pending = [
            s.input_dist(features, positions, error if k == 0 else None)
            for k, s in enumerate(self._strategies)
        ]
        kjt = features
        return Awaitable(lambda: ShardedSequenceInput(tuple(p.wait() for p in pending), kjt))

    def compute(self, dist_input: ShardedSequenceInput) -> list[Tensor]:
        """Local lookups: `(ids received, D)` rows per strategy."""
        return [
            s.compute(d) for s, d in zip(self._strategies, dist_input.per_strategy, strict=True)
        ]

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

    @property
    def fused_optimizer(self) -> ShardedFusedOptimizer:
        """KeyedOptimizer over this rank's fused shards, keyed `embeddings.<table>.weight`."""
        return self._fused_optimizer

    def embedding_configs(self) -> list[EmbeddingConfig]:
        return list(self._configs)

    def need_indices(self) -> bool:
        return self._need_indices

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        for s in self._strategies:
            s.lookup.apply_(fn)
        return result


class EmbeddingCollectionSharder:
    """Shards EmbeddingCollections; satisfies the planner's `PlannerSharder` Protocol."""

    def __init__(self, fused_params: Mapping[str, object] | None = None) -> None:
        if fused_params is not None:
            FusedOptimSpec.from_fused_params(fused_params)
        self._fused_params = None if fused_params is None else dict(fused_params)

    @property
    def module_type(self) -> type[nn.Module]:
        return EmbeddingCollection

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return self._fused_params

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [t.value for t in SEQUENCE_STRATEGIES]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        if ShardingType(sharding_type) is ShardingType.DATA_PARALLEL:
            return [EmbeddingComputeKernel.DENSE.value]
        return [EmbeddingComputeKernel.FUSED.value, EmbeddingComputeKernel.DENSE.value]

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        if not isinstance(module, EmbeddingCollection):
            raise TypeError(f"expected an EmbeddingCollection, got {type(module).__name__}")
        out: dict[str, nn.Parameter] = {}
        for c in module.embedding_configs():
            weight = module.embeddings[c.name].weight
            assert isinstance(weight, nn.Parameter)
            out[c.name] = weight
        return out

    def shard(
        self,
        module: EmbeddingCollection,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
    ) -> ShardedEmbeddingCollection:
        """The sharded module of `module` under `params` on this rank."""
        return ShardedEmbeddingCollection(
            module, params, env, device=device, fused_params=self._fused_params
        )
