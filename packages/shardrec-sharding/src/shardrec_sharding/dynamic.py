"""Sharded collections with dynamic (raw-id) tables (docs/dynamic.md, "Sharding").

A dynamic table's ids become slots *before* the ordinary sharded path, which then treats the
slots as the ids of a static table of `capacity` rows (the plan's rows):

```
raw ids --route--> id map(s) --slots back--> [ordinary input_dist / compute / output_dist]
        --fix: dropped ids read zeros / the default row--> the unsharded module's output
```

Where each table's map lives and how ids travel to it: `shardrec_sharding.dynamic_routing`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from shardrec_collectives import (
    Awaitable,
    LazyAwaitable,
    ShardingEnv,
    agree_on_error,
)
from shardrec_embedding import BaseEmbeddingConfig, EmbeddingBagConfig, PoolingType
from shardrec_embedding.dynamic import DynamicTables
from shardrec_embedding.dynamic.collection import Remapped, dynamic_configs
from shardrec_embedding.dynamic.in_flight import hold_until_backward
from shardrec_embedding.dynamic.reset import fill_rows_
from shardrec_embedding.fused import BatchedFusedEmbeddingBag
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor
from shardrec_sharding.dynamic_routing import (
    ROUTE_SALT,
    DynamicMapError,
    IdRouting,
    ShardedDynamicTable,
    ShardedDynamicTables,
    has_dynamic_tables,
    owner_part,
    precheck,
    routing_of,
)
from shardrec_sharding.embedding import ShardedEmbeddingCollection, ShardedSequenceInput
from shardrec_sharding.embeddingbag import ShardedEmbeddingBagCollection, ShardedInput
from shardrec_sharding.layout import TableSharding

__all__ = [
    "ROUTE_SALT",
    "DynamicMapError",
    "DynamicShardedEmbeddingBagCollection",
    "DynamicShardedEmbeddingCollection",
    "IdRouting",
    "ShardedDynamicTable",
    "dynamic_sharded_class",
    "has_dynamic_tables",
    "owner_part",
    "routing_of",
]


def _weight_getter(table: nn.Module) -> Callable[[], Tensor]:
    def weight() -> Tensor:
        w = table.weight
        assert isinstance(w, Tensor)
        return w

    return weight


def _state_reset(module: BatchedFusedEmbeddingBag, name: str) -> Callable[[Tensor], None]:
    """Zero the fused optimizer state rows of freed local slots of table `name`."""
    offset = module.row_offsets[[t.name for t in module.table_specs].index(name)]

    def reset(slots: Tensor) -> None:
        for state in module.optimizer_state().values():
            # one native prefetched pass for a CPU float32 state (index_fill_ elsewhere)
            fill_rows_(state, slots, row_offset=offset, value=0.0)

    return reset


class _DynamicMixin:
    """What both dynamic sharded collections add: build the maps, remap before input_dist."""

    env: ShardingEnv
    training: bool
    _owner: str
    _prefix: str
    _tables: list[TableSharding]
    _strategies: list[Any]
    dynamic_tables: DynamicTables

    def _build_dynamic(self, module: nn.Module, configs: Sequence[BaseEmbeddingConfig]) -> None:
        dyn = ShardedDynamicTables(configs, self._tables, self.env, self._owner)
        container = cast(nn.ModuleDict, getattr(self, self._prefix))
        fused = [m for s in self._strategies for m in s.lookup.fused_modules()]
        for t in dynamic_configs(list(configs)):
            if t.name in container:
                dyn.bind_weight(t.name, _weight_getter(container[t.name]))
            for m in fused:
                if t.name in [s.name for s in m.table_specs]:
                    dyn.table(t.name).add_reset_hook(_state_reset(m, t.name))
        self._copy_state(module, dyn)
        for name in dyn.tables:
            # A pipeline maps batch i+1 before batch i's backward: freed slots are reset when
            # batch i+1 is looked up (`compute`), not when it is mapped (in_flight.py).
            dyn.table(name).in_flight.defer_resets = True
        self._dynamic_features = [
            f for t in dynamic_configs(list(configs)) for f in t.feature_names
        ]
        self.dynamic_tables = dyn
        from shardrec_sharding.virtual_tier import attach_virtual_tiers  # it imports this module

        attach_virtual_tiers(
            self._tables, dyn, self._lookup_modules_of, module, container, self.env.rank
        )

    def _lookup_modules_of(self, name: str) -> list[tuple[BatchedFusedEmbeddingBag, int]]:
        """This rank's fused lookups holding table `name`, with its first row in each."""
        out = []
        for s in self._strategies:
            for m in s.lookup.fused_modules():
                names = [t.name for t in m.table_specs]
                if name in names:
                    out.append((m, m.row_offsets[names.index(name)]))
        return out

    def _copy_state(self, module: nn.Module, dyn: DynamicTables) -> None:
        """Carry a trained module's id maps over where the slots stay the same (replicated and
        table-wise maps); a row-wise table's slots change, so it must start empty."""
        source = getattr(module, "dynamic_tables", None)
        assert isinstance(source, DynamicTables)
        for name in dyn.tables:
            full = source.table(name)
            part = dyn.table(name)
            assert isinstance(part, ShardedDynamicTable)
            if not bool(full.occupied.any()):
                continue
            if part.capacity == full.capacity:
                part.load_state_dict(full.state_dict())
            elif len(part.routing.owners) > 1:
                raise ValueError(
                    f"{self._owner}: dynamic table {name!r} already holds "
                    f"{int(full.occupied.sum())} ids; a row-wise sharded dynamic table starts "
                    "empty (its ids move to the ranks owning their hash or bucket). Shard the "
                    "module before training it, or load its checkpoint into the sharded model "
                    "(docs/dynamic.md, Checkpoints)"
                )

    def _remap(self, features: KeyedJaggedTensor | object) -> Remapped:
        dyn = self.dynamic_tables
        if self.env.world_size == 1:  # on more ranks the id exchange carries the refusal
            agree_on_error(
                self.env, precheck(features, self._dynamic_features, self._owner, list(dyn.tables))
            )
        assert isinstance(dyn, ShardedDynamicTables)
        return dyn.remap(features, training=self.training, owner=self._owner)

    def _mapped_steps(self) -> tuple[tuple[str, int], ...]:
        """Each dynamic table's step after a remap (what its lookup resets up to, and holds)."""
        dyn = self.dynamic_tables
        return tuple((name, dyn.table(name).generation) for name in dyn.tables)

    def _in_flight_compute(
        self, dist_input: object, compute: Callable[[], list[Tensor]]
    ) -> list[Tensor]:
        """`compute()` of a remapped batch: first the resets of the slots freed up to its step
        (after the previous batch's backward: `in_flight.py`); in training its slots are held
        until its backward, so that a second forward before it cannot evict them."""
        steps = cast(tuple[tuple[str, int], ...], getattr(dist_input, "mapped_steps", ()))
        dyn = self.dynamic_tables
        for name, step in steps:
            dyn.table(name).in_flight.flush_resets(step)
        out = compute()
        if self.training:
            hold_until_backward([(dyn.table(n).in_flight, s) for n, s in steps], out)
            for name, step in steps:  # raw-id tiers: the batch's cache pins (virtual_tier.py)
                computed = getattr(dyn.table(name), "computed", None)
                if computed is not None:
                    computed(step, out)
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class DynamicShardedInput(ShardedInput):
    """`ShardedInput` and what the remap dropped (for the output fix)."""

    remapped: Remapped | None = None
    mapped_steps: tuple[tuple[str, int], ...] = ()
    """Each dynamic table's step after this batch's remap (`_in_flight_compute`)."""


class DynamicShardedEmbeddingBagCollection(_DynamicMixin, ShardedEmbeddingBagCollection):
    """A `ShardedEmbeddingBagCollection` of a module with dynamic tables (module docstring):
    same plan, state_dict keys and output; `dynamic_tables` holds this rank's id maps."""

    def __init__(
        self,
        module: nn.Module,
        plan: object,
        env: ShardingEnv,
        device: torch.device | str | None = None,
        fused_params: object = None,
        qcomm_codecs_registry: object = None,
    ) -> None:
        super().__init__(module, plan, env, device, fused_params, qcomm_codecs_registry)  # type: ignore[arg-type]  # checked by the base
        self._build_dynamic(module, self._configs)
        self._fix_segments = [
            (
                s.feature,
                s.dim,
                isinstance(c := self._config_of(s.table), EmbeddingBagConfig)
                and c.pooling is PoolingType.MEAN,
            )
            for s in self._segments
        ]

    def _config_of(self, table: str) -> BaseEmbeddingConfig:
        return next(c for c in self._configs if c.name == table)

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedInput]:
        """Raw ids to slots (every rank), then the ordinary input_dist of the slots."""
        remapped = self._remap(features)
        steps = self._mapped_steps()
        inner = super().input_dist(remapped.features)

        def done() -> ShardedInput:
            got = inner.wait()
            return DynamicShardedInput(got.per_strategy, got.batch_size, remapped, steps)

        return Awaitable(done)

    def compute(self, dist_input: ShardedInput) -> list[Tensor]:
        parent = super().compute
        return self._in_flight_compute(dist_input, lambda: parent(dist_input))

    def output_dist(
        self, dist_input: ShardedInput, local: list[Tensor]
    ) -> LazyAwaitable[KeyedTensor]:
        inner = super().output_dist(dist_input, local)
        remapped = getattr(dist_input, "remapped", None)

        def done() -> KeyedTensor:
            out = inner.wait()
            if remapped is None or not remapped.dropped:
                return out
            return KeyedTensor(
                keys=out.keys(),
                length_per_key=out.length_per_key(),
                values=DynamicTables.fix_pooled(out.values(), remapped, self._fix_segments),
            )

        return LazyAwaitable(done)


@dataclasses.dataclass(frozen=True, eq=False)
class DynamicShardedSequenceInput(ShardedSequenceInput):
    """`ShardedSequenceInput` with the remap and the KJT as given (raw ids, full lengths)."""

    remapped: Remapped | None = None
    original: KeyedJaggedTensor | None = None
    mapped_steps: tuple[tuple[str, int], ...] = ()


class DynamicShardedEmbeddingCollection(_DynamicMixin, ShardedEmbeddingCollection):
    """A `ShardedEmbeddingCollection` of a module with dynamic tables (module docstring)."""

    def __init__(
        self,
        module: nn.Module,
        plan: object,
        env: ShardingEnv,
        device: torch.device | str | None = None,
        fused_params: object = None,
        qcomm_codecs_registry: object = None,
    ) -> None:
        super().__init__(module, plan, env, device, fused_params, qcomm_codecs_registry)  # type: ignore[arg-type]  # checked by the base
        self._build_dynamic(module, self._configs)

    def input_dist(self, features: KeyedJaggedTensor | object) -> Awaitable[ShardedSequenceInput]:
        remapped = self._remap(features)
        steps = self._mapped_steps()
        inner = super().input_dist(remapped.features)
        original = cast(KeyedJaggedTensor, features)

        def done() -> ShardedSequenceInput:
            got = inner.wait()
            return DynamicShardedSequenceInput(
                got.per_strategy, got.features, remapped, original, steps
            )

        return Awaitable(done)

    def compute(self, dist_input: ShardedSequenceInput) -> list[Tensor]:
        parent = super().compute
        return self._in_flight_compute(dist_input, lambda: parent(dist_input))

    def output_dist(
        self, dist_input: ShardedSequenceInput, local: list[Tensor]
    ) -> LazyAwaitable[dict[str, JaggedTensor]]:
        inner = super().output_dist(dist_input, local)
        remapped = getattr(dist_input, "remapped", None)
        original = getattr(dist_input, "original", None)

        def done() -> dict[str, JaggedTensor]:
            out = inner.wait()
            if remapped is None or original is None:
                return out
            per_feature = original.to_dict()
            for s in self._segments:
                info = remapped.dropped.get(s.feature)
                if info is None and not self._need_indices:
                    continue
                jt = per_feature[s.feature]
                out[s.name] = JaggedTensor(
                    values=DynamicTables.fix_sequence(out[s.name].values(), info),
                    lengths=jt.lengths(),
                    weights=jt.values() if self._need_indices else None,
                )
            return out

        return LazyAwaitable(done)


def dynamic_sharded_class(base: type[nn.Module]) -> type[nn.Module]:
    """The sharded class for a module with dynamic tables, given the sharder's class."""
    if issubclass(base, ShardedEmbeddingBagCollection):
        return DynamicShardedEmbeddingBagCollection
    if issubclass(base, ShardedEmbeddingCollection):
        return DynamicShardedEmbeddingCollection
    raise TypeError(f"{base.__name__}: dynamic (raw-id) tables are not supported here")
