"""What every sharded collection builds from (module, plan, env), and the steps its phases share.

`ShardedEmbeddingBagCollection` and `ShardedEmbeddingCollection` differ in their strategies and
output, not in how they are put together: check the plan, take each table's weight (unless the
module is on `meta`) and fused optimizer, let each sharding type's strategy build its lookups,
and expose the local tables under the unsharded module's names with a sharded state_dict and
one fused optimizer (`ShardedCollectionBase`). Their input_dist starts the same way, and the
sharders differ only in the module they take (`TableSharder`).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

import torch
from torch import Tensor, nn

from shardrec_collectives import Awaitable, ShardingEnv, agree_on_error, qcomm
from shardrec_collectives.qcomm import QuantizedCommCodecs
from shardrec_embedding import BaseEmbeddingConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import (
    NON_OPTIMIZER_FUSED_PARAMS,
    EmbOptimType,
    FusedOptimSpec,
    fused_spec_of_param,
)
from shardrec_planner import ParameterSharding, ShardingType, sharded_kernels
from shardrec_planner.kernel_choice import RUNS_AS_FUSED, runs_tiered
from shardrec_planner.sharder_data import BaseEmbeddingSharder
from shardrec_sharding.checks import FeatureChecker
from shardrec_sharding.fused_optimizer import ShardedFusedOptimizer
from shardrec_sharding.layout import LocalTable, TableSharding, check_plan, segments_of
from shardrec_sharding.lookup import LookupTable
from shardrec_sharding.state_dict import ShardedStateDict
from shardrec_sharding.strategies._kjt import expand_variable_batch
from shardrec_sharding.tiering import tier_options
from shardrec_sharding.types import LocalBatch, PooledStrategy, SequenceStrategy, TableMaker

__all__ = [
    "DEFAULT_FUSED_OPTIMIZER",
    "ShardedCollectionBase",
    "TableSharder",
    "table_optimizer",
]

logger = logging.getLogger(__name__)

DEFAULT_FUSED_OPTIMIZER = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD)
"""What a fused table trains with when neither `fused_params` nor
`apply_optimizer_in_backward` chose an optimizer (TorchRec's default: exact SGD, lr 0.01)."""

S = TypeVar("S", PooledStrategy, SequenceStrategy)
M = TypeVar("M", bound=nn.Module)  # the module type a sharder takes
C = TypeVar("C", bound=nn.Module)  # the sharded module it makes
Builder = Callable[
    [Sequence[TableSharding], ShardingEnv, TableMaker, QuantizedCommCodecs | None], S
]


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
    if _sets_optimizer(fused_params):
        return FusedOptimSpec.from_fused_params(fused_params)  # type: ignore[arg-type]  # not None: checked
    return DEFAULT_FUSED_OPTIMIZER


def _lookup_params_not_applied(fused_params: Mapping[str, object] | None) -> dict[str, object]:
    """TorchRec's lookup-only `fused_params` (a cache, bounds checking, stochastic rounding,
    output dtype) that shardrec's fused lookup does not act on; the planner reads none of them
    either (TorchRec's storage estimator reads `cache_load_factor`)."""
    if not fused_params:
        return {}
    out = {k: v for k, v in fused_params.items() if k in NON_OPTIMIZER_FUSED_PARAMS}
    mode = out.get("bounds_check_mode")
    if mode is not None and getattr(mode, "name", str(mode)).upper().endswith("FATAL"):
        del out["bounds_check_mode"]  # what the lookups do anyway
    if out.get("stochastic_rounding") is False:
        del out["stochastic_rounding"]
    return out


def _warn_device_placement(tables: Sequence[TableSharding], device: torch.device) -> None:
    """A plan's UVM kernel runs as fused: off the cpu its rows take device memory the plan's
    estimate put in host memory, so say so (the plan report says it too)."""
    if device.type == "cpu":
        return
    for t in tables:
        kernel = t.sharding.compute_kernel
        if kernel in RUNS_AS_FUSED and kernel.value.startswith("fused_uvm"):
            logger.warning(
                "table %r: plan kernel %s runs as fused: its %d x %d rows and optimizer state "
                "live in %s memory, not host memory as a UVM estimate assumed",
                t.name,
                kernel.value,
                t.config.num_embeddings,
                t.config.embedding_dim,
                device,
            )


def _sets_optimizer(fused_params: Mapping[str, object] | None) -> bool:
    """Whether `fused_params` says anything about the optimizer (TorchRec passes `{}`, or only
    lookup keys such as `cache_load_factor`, when the optimizer comes from elsewhere)."""
    return bool(fused_params) and any(
        k not in NON_OPTIMIZER_FUSED_PARAMS
        for k in fused_params  # type: ignore[union-attr]  # not None: checked
    )


class ShardedCollectionBase(nn.Module, Generic[S, M]):
    """What a sharded collection keeps and does whatever its strategies' output: the assembled
    parts, the sharded state_dict hooks, the start of input_dist, TorchRec's per-type views,
    the fused optimizer and moving the lookups' state with `.to()`.

    Built from a module `M` (checked against `_module_types`), a plan (table name ->
    ParameterSharding), the ranks, the device of the local shards (default `env.device`) and
    the sharder's `fused_params`; `_read_module` keeps what the collection needs of the module.
    """

    _prefix: str  # the table container (`embedding_bags` or `embeddings`)
    _owner: str  # the class name that error messages give
    _module_types: tuple[type[nn.Module], ...]  # the module types it shards, the first names them
    _registry: Mapping[ShardingType, Builder[S]]  # sharding type -> its strategy
    _comm_ops: Mapping[ShardingType, qcomm.CommOp | None]  # -> its output dist's registry key

    def __init__(
        self,
        module: M,
        plan: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
        fused_params: Mapping[str, object] | None = None,
        qcomm_codecs_registry: Mapping[str, object] | None = None,
    ) -> None:
        qcomm.codecs_for(qcomm_codecs_registry)  # a bad registry is refused before any work
        if not isinstance(module, self._module_types):
            kind = self._module_types[0].__name__
            raise TypeError(f"{self._owner} shards an {kind}, got {type(module).__name__}")
        super().__init__()
        configs = self._read_module(module)
        registry = self._registry
        if device is not None and torch.device(device) != env.device:
            env = dataclasses.replace(env, device=torch.device(device))
        self.env = env
        self._device = env.device
        container = getattr(module, self._prefix)
        tables = check_plan(configs, plan, env.world_size, list(registry))
        _warn_device_placement(tables, self._device)
        full: dict[str, Tensor | None] = {}
        optimizers: dict[str, FusedOptimSpec] = {}
        for t in tables:
            weight = container[t.name].weight
            assert isinstance(weight, Tensor)
            full[t.name] = None if weight.device.type == "meta" else weight.detach()
            if t.fused:
                optimizers[t.name] = table_optimizer(module, weight, fused_params)

        def make_table(table: TableSharding, local: LocalTable) -> LookupTable:
            weight = full[table.name]
            return LookupTable(
                local=local,
                weight=None if weight is None else local.slice_of(weight),
                init_fn=table.config.init_weight_,
                optimizer=optimizers.get(table.name),
                tier=tier_options(table.sharding, env.rank),
            )

        strategies: list[S] = []
        for sharding_type, build in registry.items():
            chosen = [t for t in tables if t.sharding_type is sharding_type]
            if chosen:
                # the codecs of this type's output dist (None: exact)
                op = self._comm_ops.get(sharding_type)
                codecs = None if op is None else qcomm.codecs_for(qcomm_codecs_registry, op)
                strategies.append(build(chosen, env, make_table, codecs))
        by_name: dict[str, nn.Module] = {}
        for s in strategies:
            by_name.update(s.lookup.table_modules())
        # Registered under the unsharded module's names, so `named_parameters()` and the
        # state_dict keys match it; the lookups themselves are not submodules.
        modules = nn.ModuleDict({c.name: by_name[c.name] for c in configs if c.name in by_name})
        setattr(self, self._prefix, modules)
        self._tables = tables
        self._strategies: list[S] = strategies
        self._segments = segments_of(configs)
        self._state = ShardedStateDict(tables, env, self._prefix)
        self._fused_optimizer = ShardedFusedOptimizer(
            [
                (self._prefix, m.fused_optimizer)
                for s in strategies
                for m in s.lookup.fused_modules()
            ]
            + [  # tiered tables: their state in the store, the same keys (shardrec_tiered)
                (self._prefix, t.fused_optimizer)
                for s in strategies
                for t in s.lookup.tiered_modules()
            ],
            self._state,
        )
        is_weighted = getattr(module, "is_weighted", None)
        self._checker = FeatureChecker(
            self._segments,
            {c.name: c.num_embeddings for c in configs},
            weighted=bool(is_weighted()) if callable(is_weighted) else False,
            owner=self._owner,
        )
        # Both are untyped in torch's stubs.
        self._register_state_dict_hook(self._state.to_sharded)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(self._state.to_local)  # type: ignore[no-untyped-call]
        self._tiered = self.has_tiered_tables()  # the same on every rank
        self._tier_error: Exception | None = None  # a prefetch's, raised (agreed) by compute
        self._built()

    @abc.abstractmethod
    def _read_module(self, module: M) -> Sequence[BaseEmbeddingConfig]:
        """Keep what this collection needs of `module` (its configs, flags); its table configs."""

    def _built(self) -> None:
        """Called at the end of `__init__`, the strategies built: precompute what the forward
        reads of them (by default nothing)."""

    def _send_features(
        self, features: KeyedJaggedTensor | object
    ) -> tuple[KeyedJaggedTensor, list[Awaitable[object]]]:
        """Start every strategy's input_dist; returns the KJT sent and one pending exchange per
        strategy.

        First check `features` (bad input raises on this rank and a `PeerError` on every other,
        at the wait, no ids moved), expand a variable batch, and agree on the error where the
        first strategy's exchange does not carry it."""
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
        batch = LocalBatch(features=features, feature_pos=positions, error=error)
        # Exchanges are deferred (read at their wait): with an error, every rank still issues
        # every strategy's exchange (strategies that carry errors send nothing but the flag; the
        # others issue no collective at input_dist and are not run), and the first strategy's
        # wait raises on every rank.
        pending: list[Awaitable[object]] = [
            s.input_dist(batch)  # type: ignore[misc]  # S's input types differ; each strategy returns its own
            if error is None or s.carries_errors
            else _raising(error)
            for s in self._strategies
        ]
        return features, pending

    # -- prefetch: tiered tables' rows into their caches ahead of the lookup ------------------

    def prefetch(
        self,
        dist_input: object,
        forward_stream: object = None,
        ctx: object = None,
        *,
        background: bool = False,
    ) -> None:
        """Load the rows this rank's tiered tables (`key_value`) read for `dist_input` (what
        `input_dist(...).wait()` gave) into their caches and hold them until its `compute`;
        a no-op for tables in memory. TorchRec's signature (`forward_stream` and `ctx` are
        accepted and unused). background: read on the tables' worker threads and return at
        once (the compute waits for them); a train pipeline's prefetch stage uses it."""
        del forward_stream, ctx
        per_strategy = getattr(dist_input, "per_strategy", None)
        if per_strategy is None or len(per_strategy) != len(self._strategies):
            raise TypeError(
                f"{self._owner}.prefetch takes what input_dist(...).wait() returned, got "
                f"{type(dist_input).__name__}"
            )
        try:
            for s, d in zip(self._strategies, per_strategy, strict=True):
                if s.lookup.tiered_modules():
                    kjt = d.features
                    s.lookup.prefetch(
                        kjt.values(), kjt.offset_per_key(), d.key_index, background=background
                    )
        except Exception as e:  # raised on every rank by the batch's compute
            self._tier_error = self._tier_error or e

    def _compute_agreed(self, per_strategy: Sequence[object]) -> list[Tensor]:
        """Every strategy's local lookup. With tiered tables, an error of one rank's lookup or
        prefetch (a batch touching more distinct rows than its cache holds, a failed
        write-back) raises on every rank: the owner its own, the others a `PeerError` quoting
        it, instead of their waiting in the output_dist. Costs one `(world_size,)` int32
        all-reduce per step, and only for collections with tiered tables."""
        strategies = self._strategies
        if not self._tiered:
            return [s.compute(d) for s, d in zip(strategies, per_strategy, strict=True)]  # type: ignore[arg-type]  # each strategy takes its own input
        error, self._tier_error = self._tier_error, None
        out: list[Tensor] = []
        if error is None:
            try:
                out = [s.compute(d) for s, d in zip(strategies, per_strategy, strict=True)]  # type: ignore[arg-type]  # each strategy takes its own input
            except Exception as e:  # re-raised below, on every rank
                error = e
        agree_on_error(self.env, error)
        return out

    def has_tiered_tables(self) -> bool:
        """Whether the plan places a table of this collection in the tier (the same answer on
        every rank; `prefetch` has work on the ranks holding one)."""
        return any(runs_tiered(t.sharding) for t in self._tables)

    def cancel_prefetches(self) -> None:
        """Drop prefetched batches no compute will read (a pipeline reset), and a failed
        prefetch's error with them."""
        self._tier_error = None
        for s in self._strategies:
            for m in s.lookup.tiered_modules():
                m.cancel_prefetches()

    def _by_type(self, attr: str) -> dict[str, object]:
        return {str(s.sharding_type): getattr(s, attr) for s in self._strategies}

    # -- what TorchRec's tutorial prints: each sharding type's parts ---------------------------

    @property
    def _input_dists(self) -> dict[str, object]:
        """Sharding type -> its input distribution (ids to the ranks that own their rows)."""
        return self._by_type("input_dist")

    @property
    def _lookups(self) -> dict[str, object]:
        """Sharding type -> its table-batched lookup over this rank's shards."""
        return self._by_type("lookup")

    @property
    def _output_dists(self) -> dict[str, object]:
        """Sharding type -> its output distribution (embeddings back to the batch's rank)."""
        return self._by_type("output_dist")

    @property
    def fused_optimizer(self) -> ShardedFusedOptimizer:
        """KeyedOptimizer over this rank's fused shards, keyed `<container>.<table>.weight`
        (state `<table>.momentum1`, ...); `step()` is a no-op, rows update in backward."""
        return self._fused_optimizer

    @property
    def sharding_plan(self) -> dict[str, ParameterSharding]:
        return {t.name: t.sharding for t in self._tables}

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        # Weights move through the table container; the lookups' optimizer state here.
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        for s in self._strategies:
            s.lookup.apply_(fn)
        return result


class TableSharder(Generic[M, C]):
    """What the EmbeddingBagCollection and EmbeddingCollection sharders share; satisfies the
    planner's `PlannerSharder` Protocol with the class attributes a sharder sets, and `shard`s
    a module `M` into the sharded module `C` its `_sharded` class builds.

    Args:
        fused_params: TorchRec's fused optimizer settings (`{"optimizer": EmbOptimType.ADAM,
            "learning_rate": 0.01, ...}`) for tables whose weight has no optimizer from
            `apply_optimizer_in_backward`.

        qcomm_codecs_registry: TorchRec's quantized-communication codecs,
            `{CommOp name: QuantizedCommCodecs}` (`get_qcomm_codecs_registry`): each output
            dist quantizes its payload (forward) and gradient (backward) with its entry: the
            pooled all-to-all (table_wise, column_wise, table_column_wise), the pooled
            reduce-scatter (row_wise, table_row_wise), the sequence all-to-all (an
            EmbeddingCollection's, all but data_parallel); ids stay exact (docs/qcomm.md).
            None: exact.

    Every sharding type runs on every device type (CPU with gloo included). The compute kernels
    offered are TorchRec's (`sharded_kernels`): `dense` for data_parallel; `fused`, and on cuda
    also `fused_uvm`, `fused_uvm_caching` and `key_value`, for the others. shardrec runs the
    last three as `fused` (no UVM cache or key-value store); the plan report says so.
    """

    _modules: tuple[type[nn.Module], ...]  # the module types it shards, the first is its type
    _container: str  # the attribute holding the tables
    _sharding_types: Sequence[ShardingType]
    # the sharded module's class: (module, plan, env, device, fused_params) -> C
    _sharded: Callable[
        [
            M,
            Mapping[str, ParameterSharding],
            ShardingEnv,
            torch.device | str | None,
            Mapping[str, object] | None,
            Mapping[str, object] | None,
        ],
        C,
    ]

    def __init__(
        self,
        fused_params: Mapping[str, object] | None = None,
        qcomm_codecs_registry: Mapping[str, object] | None = None,
    ) -> None:
        qcomm.codecs_for(qcomm_codecs_registry)  # a bad registry is refused here
        self._qcomm_codecs_registry = dict(qcomm_codecs_registry) if qcomm_codecs_registry else None
        ignored = _lookup_params_not_applied(fused_params)
        if ignored:
            logger.warning(
                "%s: fused_params %s are not applied: shardrec's fused lookup has no UVM cache, "
                "always refuses out-of-range ids (FATAL), rounds updates to nearest and returns "
                "the table's dtype",
                type(self).__name__,
                ignored,
            )
        if _sets_optimizer(fused_params):
            FusedOptimSpec.from_fused_params(fused_params)  # type: ignore[arg-type]  # reject bad settings now
        self._fused_params = None if fused_params is None else dict(fused_params)

    @property
    def module_type(self) -> type[nn.Module]:
        return self._modules[0]

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return self._fused_params

    @property
    def qcomm_codecs_registry(self) -> dict[str, object] | None:
        """The registry given (the planner sizes quantized collectives by its codecs)."""
        return self._qcomm_codecs_registry

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [t.value for t in self._sharding_types]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        return sharded_kernels(sharding_type, compute_device_type)

    def shard(
        self,
        module: M,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
    ) -> C:
        """The sharded module of `module` under `params` (one entry per table) on this rank."""
        sharded = self._sharded
        if isinstance(getattr(module, "dynamic_tables", None), nn.Module):
            # Raw-id tables: ids become slots before the ordinary path (shardrec_sharding.dynamic).
            from shardrec_sharding.dynamic import dynamic_sharded_class

            sharded = dynamic_sharded_class(sharded)  # type: ignore[arg-type,assignment]  # a subclass of the sharder's class
        return sharded(module, params, env, device, self._fused_params, self._qcomm_codecs_registry)

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        if not isinstance(module, self._modules):
            raise TypeError(f"expected an {self._modules[0].__name__}, got {type(module).__name__}")
        container = getattr(module, self._container)
        out: dict[str, nn.Parameter] = {}
        for name, table in container.items():
            weight = table.weight
            assert isinstance(weight, nn.Parameter)
            out[name] = weight
        return out


# TorchRec's `isinstance(sharder, BaseEmbeddingSharder)` holds without a base class.
BaseEmbeddingSharder.register(TableSharder)


def _raising(error: BaseException) -> Awaitable[object]:
    """An awaitable that raises `error` (a strategy's input_dist not run for a bad batch)."""

    def fail() -> object:
        raise error

    return Awaitable(fail)
