"""`ShardedEmbeddingBagCollection` and its sharder.

The collection splits its tables by sharding type, hands each type's tables to that type's
strategy (`registry`), and runs the strategies' phases side by side:

```
features --input_dist--> [DistInput per strategy] --compute--> [local pooled per strategy]
         --output_dist--> [(B, D_k) per strategy] --cat + one column gather--> KeyedTensor
```

The output has the unsharded module's keys in its order (TorchRec 1.8 orders them by sharding
group instead) and its values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from shardrec_collectives import Awaitable, LazyAwaitable, ShardingEnv, agree_on_error
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec, fused_spec_of_param
from shardrec_planner import EmbeddingComputeKernel, ParameterSharding, ShardingType
from shardrec_sharding._assembly import assemble
from shardrec_sharding.checks import FeatureChecker
from shardrec_sharding.fused_optimizer import ShardedFusedOptimizer
from shardrec_sharding.layout import segments_of
from shardrec_sharding.registry import POOLED_STRATEGIES
from shardrec_sharding.strategies._kjt import expand_variable_batch
from shardrec_sharding.types import DistInput, PooledStrategy

__all__ = [
    "DEFAULT_FUSED_OPTIMIZER",
    "EmbeddingBagCollectionSharder",
    "ShardedEmbeddingBagCollection",
    "ShardedInput",
]

_OWNER = "ShardedEmbeddingBagCollection"

DEFAULT_FUSED_OPTIMIZER = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD)
"""What a fused table trains with when neither `fused_params` nor
`apply_optimizer_in_backward` chose an optimizer (TorchRec's default: exact SGD, lr 0.01)."""

PooledModule = EmbeddingBagCollection | FusedEmbeddingBagCollection


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedInput:
    """The result of `input_dist`: one `DistInput` per strategy, in strategy order."""

    per_strategy: tuple[DistInput, ...]
    batch_size: int


def table_optimizer(
    module: nn.Module, weight: Tensor, fused_params: Mapping[str, object] | None
) -> FusedOptimSpec:
    """The fused optimizer of one table: `apply_optimizer_in_backward` on its weight first,
    then a FusedEmbeddingBagCollection's own optimizer, then the sharder's `fused_params`."""
    spec = fused_spec_of_param(weight)
    if spec is not None:
        return spec
    own = getattr(module, "optimizer_spec", None)
    if callable(own):
        found = own()
        if isinstance(found, FusedOptimSpec):
            return found
    if fused_params:
        return FusedOptimSpec.from_fused_params(fused_params)
    return DEFAULT_FUSED_OPTIMIZER


class ShardedEmbeddingBagCollection(nn.Module):
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

    def __init__(
        self,
        module: PooledModule,
        plan: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
        fused_params: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, EmbeddingBagCollection | FusedEmbeddingBagCollection):
            raise TypeError(
                f"{_OWNER} shards an EmbeddingBagCollection, got {type(module).__name__}"
            )
        configs: list[EmbeddingBagConfig] = module.embedding_bag_configs()
        if device is not None and torch.device(device) != env.device:
            env = dataclasses.replace(env, device=torch.device(device))
        self.env = env
        self._device = env.device
        self._configs = configs
        self._is_weighted = module.is_weighted()
        self._segments = segments_of(configs)
        weights: dict[str, Tensor] = {}
        for c in configs:
            weight = module.embedding_bags[c.name].weight
            assert isinstance(weight, Tensor)
            weights[c.name] = weight
        parts = assemble(
            configs=configs,
            plan=plan,
            env=env,
            weights=weights,
            optimizer_of=lambda w: table_optimizer(module, w, fused_params),
            registry=POOLED_STRATEGIES,
            prefix="embedding_bags",
        )
        self._tables = parts.tables
        self._strategies: list[PooledStrategy] = parts.strategies
        self.embedding_bags = parts.modules
        self._state = parts.state
        self._fused_optimizer = parts.fused_optimizer
        self._checker = FeatureChecker(
            self._segments,
            {c.name: c.num_embeddings for c in configs},
            weighted=self._is_weighted,
            owner=_OWNER,
        )
        self._permutation = self._output_permutation()
        # Both are untyped in torch's stubs.
        self._register_state_dict_hook(self._state.to_sharded)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(self._state.to_local)  # type: ignore[no-untyped-call]

    def _output_permutation(self) -> Tensor | None:
        starts: list[int] = []
        start = 0
        for s in self._strategies:
            starts.append(start)
            start += s.output_dim
        order: list[int] = []
        for seg in self._segments:
            for k, s in enumerate(self._strategies):
                if seg.index in s.segment_columns:
                    order.extend(starts[k] + c for c in s.segment_columns[seg.index])
        if order == list(range(len(order))):
            return None
        return torch.tensor(order, dtype=torch.int64, device=self._device)

    # -- what TorchRec's tutorial prints: each sharding type's parts ---------------------------

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
        """Sharding type -> its output distribution (embeddings back to the batch's rank)."""
        return {str(s.sharding_type): s.output_dist for s in self._strategies}

    # -- the three phases --------------------------------------------------------------------

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedInput]:
        """Send every id to the ranks that hold its rows (one exchange per sharding type).

        Bad input (wrong type or weights, missing feature, id out of range) raises on this rank
        and a `PeerError` on every other rank, before any ids move.
        """
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
        batch = features.stride()
        return Awaitable(lambda: ShardedInput(tuple(p.wait() for p in pending), batch))

    def compute(self, dist_input: ShardedInput) -> list[Tensor]:
        """Local lookups: one `(rows of the received batch, local dims)` tensor per strategy."""
        return [
            s.compute(d) for s, d in zip(self._strategies, dist_input.per_strategy, strict=True)
        ]

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
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        if self._permutation is not None:
            out = out.index_select(1, self._permutation)
        return KeyedTensor(
            keys=[s.name for s in self._segments],
            length_per_key=[s.dim for s in self._segments],
            values=out,
        )

    def forward(self, features: KeyedJaggedTensor) -> LazyAwaitable[KeyedTensor]:
        """`output_dist(compute(input_dist(features)))`: `KeyedTensor (B, sum of dims)`."""
        dist_input = self.input_dist(features).wait()
        return self.output_dist(dist_input, self.compute(dist_input))

    # -- the rest of the EmbeddingBagCollection surface ---------------------------------------

    @property
    def fused_optimizer(self) -> ShardedFusedOptimizer:
        """KeyedOptimizer over this rank's fused shards, keyed `embedding_bags.<table>.weight`
        (state `<table>.momentum1`, ...); `step()` is a no-op, rows update in backward."""
        return self._fused_optimizer

    @property
    def sharding_plan(self) -> dict[str, ParameterSharding]:
        return {t.name: t.sharding for t in self._tables}

    def is_weighted(self) -> bool:
        return self._is_weighted

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return list(self._configs)

    def embedding_names(self) -> list[str]:
        return [s.name for s in self._segments]

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        # Weights move through `embedding_bags`; the lookups' optimizer state here.
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        for s in self._strategies:
            s.lookup.apply_(fn)
        return result

    def extra_repr(self) -> str:
        kinds = ", ".join(
            f"{st.sharding_type.value}: "
            f"{[t.name for t in self._tables if t.sharding_type is st.sharding_type]}"
            for st in self._strategies
        )
        return f"rank={self.env.rank}/{self.env.world_size}, {kinds}"


_ALL_TYPES = [t for t in POOLED_STRATEGIES]


class EmbeddingBagCollectionSharder:
    """Shards EmbeddingBagCollections; satisfies the planner's `PlannerSharder` Protocol.

    Args:
        fused_params: TorchRec's fused optimizer settings (`{"optimizer": EmbOptimType.ADAM,
            "learning_rate": 0.01, ...}`) for tables whose weight has no optimizer from
            `apply_optimizer_in_backward`.

    Every sharding type runs on every device type (CPU with gloo included).
    """

    def __init__(self, fused_params: Mapping[str, object] | None = None) -> None:
        if fused_params is not None:
            FusedOptimSpec.from_fused_params(fused_params)  # reject bad settings now
        self._fused_params = None if fused_params is None else dict(fused_params)

    @property
    def module_type(self) -> type[nn.Module]:
        return EmbeddingBagCollection

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return self._fused_params

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [t.value for t in _ALL_TYPES]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        if ShardingType(sharding_type) is ShardingType.DATA_PARALLEL:
            return [EmbeddingComputeKernel.DENSE.value]
        return [EmbeddingComputeKernel.FUSED.value, EmbeddingComputeKernel.DENSE.value]

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        if not isinstance(module, EmbeddingBagCollection | FusedEmbeddingBagCollection):
            raise TypeError(f"expected an EmbeddingBagCollection, got {type(module).__name__}")
        out: dict[str, nn.Parameter] = {}
        for c in module.embedding_bag_configs():
            weight = module.embedding_bags[c.name].weight
            assert isinstance(weight, nn.Parameter)
            out[c.name] = weight
        return out

    def shard(
        self,
        module: PooledModule,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
    ) -> ShardedEmbeddingBagCollection:
        """The sharded module of `module` under `params` (one entry per table) on this rank."""
        return ShardedEmbeddingBagCollection(
            module, params, env, device=device, fused_params=self._fused_params
        )
