"""Sharded MC collections (bag and sequence): raw ids routed to the rank owning them.

Each table's MC state is split like its rows. Row-wise: rank r owns rows `[o_r, o_r + n_r)` and
the part of the raw-id space that maps to them (MCH: `(id mod input_hash_size)` in the r-th of
equal blocks, TorchRec's bucketization; HashZch: the ids of the buckets whose rows it holds) and
keeps an MC module rebuilt over its rows. Table-wise: the table's rank owns every id. A forward:

    raw ids --all-to-all (to the owner of each id)--> owner: its MC module remaps (and, in
    training, admits / evicts) --all-to-all back--> rows, in the batch's order
        --> the sharded EmbeddingBagCollection / EmbeddingCollection (whose row-wise shards
            are the same rows)

Rows an owner takes from other ids for new ids are reset before the lookup: the row to the
table's initializer in its local shard, its fused optimizer state (Adagrad's sum, Adam's
moments) to zero. Rows no id held keep their weights, as in the unsharded module
(shardrec_embedding/mc/reused_rows.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shardrec_collectives import LazyAwaitable, ShardingEnv, kjt_all_to_all
from shardrec_embedding.mc import (
    BaseManagedCollisionEmbeddingCollection,
    HashZchManagedCollisionModule,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
    ManagedCollisionModule,
    MCHManagedCollisionModule,
)
from shardrec_embedding.mc.collection import _tables_features
from shardrec_embedding.mc.reused_rows import ReusedRows
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor
from shardrec_planner import ParameterSharding, ShardingType
from shardrec_sharding.embedding import EmbeddingCollectionSharder
from shardrec_sharding.embeddingbag import EmbeddingBagCollectionSharder

__all__ = [
    "ShardedManagedCollisionCollection",
    "ShardedManagedCollisionEmbeddingBagCollection",
    "ShardedManagedCollisionEmbeddingCollection",
]

_SUPPORTED = (ShardingType.ROW_WISE, ShardingType.TABLE_WISE)


class _Route:
    """Which rank owns each raw id of one table, and this rank's MC module for it."""

    def __init__(
        self,
        table: str,
        mc: ManagedCollisionModule,
        plan: ParameterSharding,
        env: ShardingEnv,
        device: torch.device | None,
    ) -> None:
        kind = ShardingType(plan.sharding_type)
        if kind not in _SUPPORTED:
            raise ValueError(
                f"table {table!r}: managed-collision tables shard {[t.value for t in _SUPPORTED]}"
                f", got {kind.value}; plan it row_wise or table_wise"
            )
        assert plan.sharding_spec is not None
        shards = sorted(plan.sharding_spec.shards, key=lambda s: s.shard_offsets[0])
        if len(shards) > 1 and isinstance(mc, MCHManagedCollisionModule) and mc.input_size() < 1:
            raise ValueError(
                f"table {table!r}: row-wise MCH routes an id by (id mod input_hash_size), and "
                f"input_hash_size is {mc.input_size()}; build the module with input_hash_size "
                ">= 1 (default 2**63 - 1) or plan the table table_wise"
            )
        self.kind = kind
        self.table = table
        self.ranks = [s.rank for s in shards]
        bounds = [s.shard_offsets[0] for s in shards] + [mc.output_size()]
        self.bounds = bounds
        self.local: ManagedCollisionModule | None = None
        self.row_offset = 0
        if env.rank in self.ranks:
            i = self.ranks.index(env.rank)
            self.row_offset = bounds[i]
            if kind is ShardingType.TABLE_WISE:
                self.local = mc
            else:
                self.local = mc.rebuild_with_output_id_range(
                    (bounds[i], bounds[i + 1]), bounds, device
                )
        self._mc = mc

    def owners(self, ids: torch.Tensor) -> torch.Tensor:
        """`(N,)` rank owning each raw id."""
        ranks = torch.tensor(self.ranks, dtype=torch.int64, device=ids.device)
        if self.kind is ShardingType.TABLE_WISE or len(self.ranks) == 1:
            return ranks[torch.zeros_like(ids)]
        mc, shards = self._mc, len(self.ranks)
        if isinstance(mc, HashZchManagedCollisionModule):
            bucket_rows = mc.output_size() // mc.buckets()
            if mc.input_size() == 0:
                bucket = torch.remainder(ids, mc.buckets())
            else:
                block = -(-mc.input_size() // mc.buckets())
                bucket = torch.div(
                    torch.remainder(ids, mc.input_size()), block, rounding_mode="floor"
                )
            first_row = bucket * bucket_rows
            bounds = torch.tensor(self.bounds[1:-1], dtype=torch.int64, device=ids.device)
            return ranks[torch.bucketize(first_row, bounds, right=True)]
        size = mc.input_size()
        block = -(-size // shards)
        return ranks[torch.div(torch.remainder(ids, size), block, rounding_mode="floor")]


class ShardedManagedCollisionCollection(nn.Module):
    """This rank's MC modules of a sharded MC collection (TorchRec's
    `ShardedManagedCollisionCollection`, the attribute `_managed_collision_collection`): one per
    table this rank owns rows of, rebuilt over those rows. Its state-dict keys are the unsharded
    `ManagedCollisionCollection`'s (`_managed_collision_modules.<table>.<buffer>`), each rank
    holding its own rows' state."""

    def __init__(self, modules: Mapping[str, ManagedCollisionModule]) -> None:
        super().__init__()
        self._managed_collision_modules = nn.ModuleDict(dict(modules))

    def evict(self) -> dict[str, torch.Tensor | None]:
        """`{table: global rows freed since the last call (this rank's), or None}`; the sharded
        forward calls it itself (and resets those rows), so after a forward it reads None."""
        return {table: _mc(module).evict() for table, module in self._items()}

    def open_slots(self) -> dict[str, torch.Tensor]:
        """`{table: rows of this rank not owned by an id, (1,)}`."""
        return {table: _mc(module).open_slots() for table, module in self._items()}

    def _items(self) -> list[tuple[str, nn.Module]]:
        return list(self._managed_collision_modules.items())


def _mc(module: nn.Module) -> ManagedCollisionModule:
    assert isinstance(module, ManagedCollisionModule)
    return module


def _reread_reused_rows(module: nn.Module, incompatible_keys: object) -> None:
    if isinstance(module, _ShardedMC):
        module._reused_rows.invalidate()


class _ShardedMC(nn.Module):
    """What the sharded MC collections share: the routes, the local MC modules (in
    `_managed_collision_collection`, as TorchRec's), the remap and the reset of rows handed to
    new ids; `_embedding_module` is the sharded collection."""

    _container: str  # the sharded collection's attribute holding the tables

    def __init__(
        self,
        module: BaseManagedCollisionEmbeddingCollection,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None,
        embedding_module: nn.Module,
    ) -> None:
        super().__init__()
        mcc = module._managed_collision_collection
        mc_modules = mcc._managed_collision_modules
        self._env = env
        self._tables = list(mcc._table_to_features)
        self._features = mcc._feature_names
        self._splits = mcc._table_feature_splits
        dev = None if device is None else torch.device(device)
        self._routes = []
        for table in self._tables:
            mc = mc_modules[table]
            assert isinstance(mc, (MCHManagedCollisionModule, HashZchManagedCollisionModule))
            if table not in params:
                raise ValueError(f"table {table!r} has no entry in the plan; plan every table")
            self._routes.append(_Route(table, mc, params[table], env, dev))
        self._managed_collision_collection = ShardedManagedCollisionCollection(
            {r.table: r.local for r in self._routes if r.local is not None}
        )
        self._embedding_module = embedding_module
        self._reused_rows = ReusedRows()
        self.register_load_state_dict_post_hook(_reread_reused_rows)  # type: ignore[no-untyped-call]  # untyped in torch
        self._return_remapped = module._return_remapped_features
        self._configs = {c.name: c for c in mcc.embedding_configs()}

    @property
    def _managed_collision_modules(self) -> nn.ModuleDict:
        """This rank's MC modules by table (`_managed_collision_collection`'s)."""
        return self._managed_collision_collection._managed_collision_modules

    def evict(self) -> dict[str, torch.Tensor | None]:
        """The sharded collection's `evict()` (this rank's tables)."""
        return self._managed_collision_collection.evict()

    def open_slots(self) -> dict[str, torch.Tensor]:
        """The sharded collection's `open_slots()` (this rank's tables)."""
        return self._managed_collision_collection.open_slots()

    def remap(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        """This rank's batch with raw ids replaced by rows (every rank must call it together)."""
        self._reused_rows.prepare(self._managed_collision_modules)
        features = _tables_features(features, self._features)
        world = self._env.world_size
        parts = features.split(self._splits)
        error: BaseException | None = None
        sends: list[list[torch.Tensor]] = [[] for _ in range(world)]
        counts: list[list[int]] = [[] for _ in range(world)]
        orders: list[torch.Tensor] = []
        for route, part in zip(self._routes, parts, strict=True):
            ids = part.values()
            if ids.is_floating_point() and error is None:
                error = TypeError(
                    f"table {route.table!r} has {ids.dtype} ids; raw ids must be integers"
                )
                ids = ids.to(torch.int64)
            ids = ids.to(torch.int64)
            owner = route.owners(ids)
            order = torch.argsort(owner, stable=True)
            per_rank = torch.bincount(owner, minlength=world).tolist()
            orders.append(order)
            for d, piece in enumerate(torch.split(ids[order], per_rank)):
                sends[d].append(piece)
                counts[d].append(per_rank[d])
        there = kjt_all_to_all(
            self._env, [self._kjt(sends[d], counts[d]) for d in range(world)], error=error
        ).wait()
        backs: list[list[torch.Tensor]] = [[] for _ in range(world)]
        back_counts: list[list[int]] = [[] for _ in range(world)]
        for route in self._routes:
            jt = there[route.table]
            from_rank = jt.lengths().tolist()
            ids = jt.values()
            if route.local is not None:
                out = route.local({route.table: JaggedTensor(values=ids, lengths=jt.lengths())})
                ids = out[route.table].values()
            for s, piece in enumerate(torch.split(ids, from_rank)):
                backs[s].append(piece)
                back_counts[s].append(from_rank[s])
        home = kjt_all_to_all(
            self._env, [self._kjt(backs[s], back_counts[s]) for s in range(world)]
        ).wait()
        rows = []
        for route, order in zip(self._routes, orders, strict=True):
            sorted_rows = home[route.table].values()
            unsorted = torch.empty_like(sorted_rows)
            unsorted[order] = sorted_rows
            rows.append(unsorted)
        values = torch.cat(rows) if rows else features.values()
        return KeyedJaggedTensor(
            keys=features.keys(),
            values=values.to(features.values().dtype),
            lengths=features.lengths(),
            weights=features.weights_or_none(),
            stride=features.stride(),
        )

    def _kjt(self, values: list[torch.Tensor], counts: list[int]) -> KeyedJaggedTensor:
        return KeyedJaggedTensor(
            keys=self._tables,
            values=torch.cat(values) if values else torch.empty(0, dtype=torch.int64),
            lengths=torch.tensor(counts, dtype=torch.int64),
            stride=1,
        )

    @torch.no_grad()
    def _reset_evicted(self) -> None:
        # Local tensors only (no state_dict): each owner evicts on its own schedule, and the
        # sharded state dict's ShardedTensors would start collectives on one rank only.
        params = dict(self._embedding_module.named_parameters())
        optimizer = getattr(self._embedding_module, "fused_optimizer", None)
        states = getattr(optimizer, "state", {})
        handed_out = {r.table: r.local.evict() for r in self._routes if r.local is not None}
        reused = self._reused_rows.reused(handed_out)  # not rows no id held (kept as built)
        for route in self._routes:
            rows = reused.get(route.table)
            if rows is None or rows.numel() == 0:
                continue
            weight = params[f"{self._container}.{route.table}.weight"]
            index = (rows - route.row_offset).to(weight.device)
            fresh = weight.new_empty((rows.numel(), weight.size(1)))
            self._configs[route.table].init_weight_(fresh)
            weight[index] = fresh
            for value in states.get(weight, {}).values():
                per_row = isinstance(value, torch.Tensor) and value.dim() >= 1
                if per_row and value.size(0) == weight.size(0):
                    value[index] = 0  # a fused optimizer's per-row state starts at zero


class ShardedManagedCollisionEmbeddingBagCollection(_ShardedMC):
    """A `ManagedCollisionEmbeddingBagCollection` sharded row-wise or table-wise (module
    docstring). `forward(features)` returns, as the unsharded module, `(embeddings, remapped
    features or None)`; the embeddings a `LazyAwaitable[KeyedTensor]` of this rank's batch."""

    _container = "embedding_bags"

    def __init__(
        self,
        module: ManagedCollisionEmbeddingBagCollection,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
        ebc_sharder: EmbeddingBagCollectionSharder | None = None,
    ) -> None:
        sharder = ebc_sharder or EmbeddingBagCollectionSharder()
        sharded = sharder.shard(module._embedding_bag_collection, params, env, device)
        super().__init__(module, params, env, device, sharded)

    def forward(
        self, features: KeyedJaggedTensor
    ) -> tuple[LazyAwaitable[KeyedTensor], KeyedJaggedTensor | None]:
        remapped = self.remap(features)
        self._reset_evicted()
        result: LazyAwaitable[KeyedTensor] = self._embedding_module(remapped)
        return result, remapped if self._return_remapped else None


class ShardedManagedCollisionEmbeddingCollection(_ShardedMC):
    """A `ManagedCollisionEmbeddingCollection` sharded row-wise or table-wise (module
    docstring). `forward(features)` returns `(LazyAwaitable[dict[str, JaggedTensor]], remapped
    features or None)`, as the unsharded module."""

    _container = "embeddings"

    def __init__(
        self,
        module: ManagedCollisionEmbeddingCollection,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
        ec_sharder: EmbeddingCollectionSharder | None = None,
    ) -> None:
        sharder = ec_sharder or EmbeddingCollectionSharder()
        sharded = sharder.shard(module._embedding_collection, params, env, device)
        super().__init__(module, params, env, device, sharded)

    def forward(
        self, features: KeyedJaggedTensor
    ) -> tuple[LazyAwaitable[dict[str, JaggedTensor]], KeyedJaggedTensor | None]:
        remapped = self.remap(features)
        self._reset_evicted()
        result: LazyAwaitable[dict[str, JaggedTensor]] = self._embedding_module(remapped)
        return result, remapped if self._return_remapped else None
