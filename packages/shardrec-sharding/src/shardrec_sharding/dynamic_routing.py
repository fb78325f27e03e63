"""Where a sharded collection's dynamic (raw-id) tables keep their id maps, and how a batch's raw
ids travel to them and their slots come back (part of `shardrec_sharding.dynamic`).

Where each table's map lives (`IdRouting`):

- row_wise / table_row_wise: **partitioned**. Every rank holding a row block owns a part of
  the id space (the ids with `mix64(id ^ ROUTE_SALT) % parts == part`) and its row block's
  slots: the owner maps its ids to local slots, global slot = row offset + local slot, so the
  row-wise bucketizer sends each slot back to the same owner. The salt decorrelates the
  routing from the map's own probe (which uses the low bits of `mix64(id)`). A row_wise
  table that declares `total_num_buckets` is **bucketed** instead (table_row_wise keeps the
  hash, as TorchRec's table-row-wise input dist ignores buckets): each part owns a range of
  whole buckets of the id space and the same buckets of slots, and an id goes to the part
  owning its bucket, TorchRec's rule (`shardrec_sharding.id_buckets`).
- table_wise: partitioned with one part, the rank holding the table.
- column_wise / table_column_wise / data_parallel: **replicated**. Every rank keeps the whole
  map and maps every rank's ids (all-gathered, in rank order) as one step, so every replica
  makes the same decisions and each column block (or replica) resets the same freed slots.

The exchanges are extra collectives before the ordinary input_dist, shared by all the
dynamic tables of a batch (`ShardedDynamicTables.remap`, buffers and flags in
`shardrec_sharding._dynamic_exchange`): one all-to-all of every table's ids (with its size
exchange), packed for all tables in one native pass, and one all-to-all of the partitioned
tables' slots back. A replicated table's ids ride in the same exchange, sent to every rank.
Each block's header carries a flag, so a rank refusing its batch or an owner whose map raises
makes every rank raise (no hang) at no extra collective.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv, all_gather_ids, all_to_all_ids, return_ids
from shardrec_embedding import BaseEmbeddingConfig
from shardrec_embedding.dynamic import DynamicTable, DynamicTables, mix64
from shardrec_embedding.dynamic.collection import Remapped
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding._dynamic_exchange import (
    DynamicMapError,
    Packed,
    RoutePlan,
    by_table,
    exchange_back,
    exchange_out,
    pack,
    pack_refusal,
)
from shardrec_sharding._dynamic_state import PartState
from shardrec_sharding.id_buckets import bucket_bounds, bucket_part
from shardrec_sharding.layout import TableSharding

__all__ = [
    "ROUTE_SALT",
    "DynamicMapError",
    "IdRouting",
    "ShardedDynamicTable",
    "ShardedDynamicTables",
    "has_dynamic_tables",
    "owner_part",
    "precheck",
    "routing_of",
]

ROUTE_SALT = 0x5851F42D4C957F2D
"""XORed into a raw id before `mix64` to pick its part (decorrelated from the map's probe)."""

_ROW_SPLIT = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)


def has_dynamic_tables(module: nn.Module) -> bool:
    """Whether `module` (an embedding collection) has a dynamic table."""
    return isinstance(getattr(module, "dynamic_tables", None), DynamicTables)


def owner_part(ids: Tensor, parts: int) -> Tensor:
    """`(N,)` int64 part in `[0, parts)` of each raw id: `mix64(id ^ ROUTE_SALT) mod parts`."""
    return torch.remainder(mix64(ids.to(torch.int64) ^ ROUTE_SALT), parts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdRouting:
    """Where one dynamic table's id map lives (module docstring).

    replicated: every rank maps every id. Otherwise part k of the id space belongs to rank
    `owners[k]`, whose map holds `capacities[k]` slots, global slots `offsets[k] + local`.
    bounds: empty (an id's part is its routing hash) or, for a bucketed table, the
    `len(owners) + 1` id bounds of the parts (`shardrec_sharding.id_buckets`).
    """

    replicated: bool
    owners: tuple[int, ...] = ()
    offsets: tuple[int, ...] = ()
    capacities: tuple[int, ...] = ()
    bounds: tuple[int, ...] = ()

    def part_of(self, ids: Tensor) -> Tensor:
        """`(N,)` int64 part of each raw id of a partitioned table (its bucket's part when
        bucketed, else its routing hash's)."""
        if self.bounds:
            return bucket_part(ids, self.bounds)
        return owner_part(ids, len(self.owners))

    def local_capacity(self, rank: int, capacity: int) -> int:
        """Slots of this rank's map (0 when it owns no part)."""
        if self.replicated:
            return capacity
        return self.capacities[self.owners.index(rank)] if rank in self.owners else 0

    def local_offset(self, rank: int) -> int:
        if self.replicated or rank not in self.owners:
            return 0
        return self.offsets[self.owners.index(rank)]


def routing_of(table: TableSharding) -> IdRouting:
    """The routing of `table`'s ids under its sharding type: bucketed when a row_wise table
    declares `total_num_buckets` (ValueError naming the table, the value and the fix when its
    buckets cannot be cut; raised alike on every rank, which all build the same routing)."""
    st = table.sharding_type
    if st in _ROW_SPLIT or st is ShardingType.TABLE_WISE:
        parts = sorted((s for s in table.shards if s.rows > 0), key=lambda s: s.row_offset)
        bounds: tuple[int, ...] = ()
        cfg = table.config
        buckets = cfg.total_num_buckets
        if buckets is not None and st is ShardingType.ROW_WISE:  # TorchRec's one bucket path
            rows = [s.rows for s in sorted(table.shards, key=lambda s: (s.row_offset, s.rank))]
            space = cfg.id_space if cfg.id_space is not None else cfg.num_embeddings
            bounds = bucket_bounds(cfg.name, buckets, space, cfg.num_embeddings, rows)
        return IdRouting(
            replicated=False,
            owners=tuple(s.rank for s in parts),
            offsets=tuple(s.row_offset for s in parts),
            capacities=tuple(s.rows for s in parts),
            bounds=bounds,
        )
    return IdRouting(replicated=True)


class ShardedDynamicTable(DynamicTable):
    """This rank's part of one sharded dynamic table: a `DynamicTable` of its local capacity
    whose `map_ids` takes this rank's raw ids and returns their *global* slots, exchanging
    ids with the other ranks (every rank calls it once per batch, in the same table order).

    Counters (`stats()`) are this part's: a partitioned table's sum over ranks is the table's;
    a replicated table's every replica counts every id.
    """

    def __init__(
        self,
        config: BaseEmbeddingConfig,
        routing: IdRouting,
        env: ShardingEnv,
    ) -> None:
        assert config.dynamic is not None
        super().__init__(
            config.name,
            config.dynamic,
            routing.local_capacity(env.rank, config.num_embeddings),
            config.embedding_dim,
        )
        self.routing = routing
        self.env = env
        self.table_capacity = config.num_embeddings
        self._owners = torch.tensor(routing.owners, dtype=torch.int64)
        self._offset = routing.local_offset(env.rank)
        self._owns = routing.replicated or env.rank in routing.owners
        self._premapped: Tensor | None = None  # this batch's slots, from the shared exchange
        if not routing.replicated and env.world_size > 1:
            # Each part's state is a piece of one table-wide state (checkpoints): see
            # `PartState`. Replicated maps are the same on every rank and stay plain.
            state = PartState(self)
            self._register_state_dict_hook(state.to_sharded)  # type: ignore[no-untyped-call]  # untyped in torch's stubs
            self._register_load_state_dict_pre_hook(state.to_local)  # type: ignore[no-untyped-call]  # untyped in torch's stubs

    def map_ids(self, ids: Tensor, *, training: bool) -> Tensor:
        """`(N,)` global slot of each of this rank's raw ids (-1: no slot); see the class.

        A sharded collection maps its tables through its shared exchange
        (`ShardedDynamicTables.remap`, which carries the error flags); called on its own, this
        per-table exchange (the reference the shared one is tested against) carries none."""
        ids = ids.reshape(-1)
        premapped, self._premapped = self._premapped, None
        if premapped is not None:  # mapped by the collection's shared exchange (same ids)
            assert premapped.numel() == ids.numel()
            return premapped
        if ids.is_floating_point() or ids.is_complex() or ids.dtype is torch.bool:
            raise TypeError(
                f"dynamic table {self.name!r}: raw ids must be integers, got dtype {ids.dtype}; "
                "cast whole numbers with .long()"
            )
        ids = ids.to(device="cpu", dtype=torch.int64)
        env = self.env
        if self.routing.replicated:
            every, counts = all_gather_ids(env, ids)
            slots = super().map_ids(every, training=training)
            start = sum(counts[: env.rank])
            return slots[start : start + ids.numel()]
        order, send = self.route(ids)
        received, recv = all_to_all_ids(env, ids[order], send)
        found = self.map_local(received, training=training)
        back = return_ids(env, found, recv, send)
        out = torch.empty_like(back)
        out[order] = back
        return out

    def route(self, ids: Tensor) -> tuple[Tensor, list[int]]:
        """A partitioned table's send order of this rank's int64 `ids` (grouped by owner rank,
        stable) and how many go to each rank."""
        dest = self._owners[self.routing.part_of(ids)]
        order = torch.sort(dest, stable=True).indices
        return order, torch.bincount(dest, minlength=self.env.world_size).tolist()

    def map_local(self, received: Tensor, *, training: bool) -> Tensor:
        """The owner step: the global slots of the ids this rank `received` (a replicated
        table: every rank's; empty when this rank owns no part: nothing was sent here)."""
        if not self._owns:
            return received
        local = super().map_ids(received, training=training)
        return torch.where(local >= 0, local + self._offset, local)


class ShardedDynamicTables(DynamicTables):
    """The `DynamicTables` of a sharded collection: one `ShardedDynamicTable` per dynamic
    table, freed slots reset in this rank's rows and fused optimizer state."""

    def __init__(
        self,
        configs: Sequence[BaseEmbeddingConfig],
        tables: Sequence[TableSharding],
        env: ShardingEnv,
        owner: str,
    ) -> None:
        from shardrec_sharding.virtual_tier import part_class  # it subclasses this module's

        routing = {t.name: routing_of(t) for t in tables}
        kinds = {t.name: part_class(t) for t in tables}
        super().__init__(
            configs,
            owner,
            make_table=lambda c: kinds[c.name](c, routing[c.name], env),
        )
        self._env = env

    def _part(self, name: str) -> ShardedDynamicTable:
        table = self.table(name)
        assert isinstance(table, ShardedDynamicTable)
        return table

    def remap(
        self, features: KeyedJaggedTensor | object, *, training: bool, owner: str
    ) -> Remapped:
        """`DynamicTables.remap`, with every table's ids exchanged in one all-to-all (and the
        partitioned tables' slots in one back) instead of one exchange per table: each owner
        maps each table's received ids with that table, in table order, as the per-table
        path does (the same decisions and slots). On more than one rank, a rank's refusal of
        its batch (`precheck`) or an owner's failing map makes every rank raise
        (`_dynamic_exchange`), every map taken back to its state before the batch
        (`shardrec_embedding.dynamic.undo`)."""
        if self._env.world_size > 1:
            for name, slots in self._exchange_map(features, training=training, owner=owner).items():
                self._part(name)._premapped = slots
        assert isinstance(features, KeyedJaggedTensor)
        try:
            return super().remap(features, training=training, owner=owner)
        finally:
            for name in self.tables:
                self._part(name)._premapped = None

    def _features(self) -> list[str]:
        return [f for feats in self._table_features.values() for f in feats]

    def _route_plan(self) -> RoutePlan:
        plan = self.__dict__.get("_plan")
        if plan is None:
            routes = [
                (p.routing.replicated, p.routing.owners, p.routing.bounds)
                for p in map(self._part, self.tables)
            ]
            plan = RoutePlan.of(routes, self._env.world_size, ROUTE_SALT)
            self.__dict__["_plan"] = plan
        assert isinstance(plan, RoutePlan)
        return plan

    def _pack(self, features: KeyedJaggedTensor) -> tuple[Packed, list[int]]:
        """This rank's out buffer, and each table's id count."""
        values = features.values()
        opk = features.offset_per_key()
        position = {k: i for i, k in enumerate(features.keys())}
        spans = [
            (opk[position[f]], opk[position[f] + 1])
            for name in self.tables
            for f in self._table_features[name]
        ]
        ids = (
            torch.cat([values[a:b] for a, b in spans])
            if len(spans) > 1
            else values[spans[0][0] : spans[0][1]]
        )
        lens = [
            sum(opk[position[f] + 1] - opk[position[f]] for f in self._table_features[name])
            for name in self.tables
        ]
        ids = ids.to(device="cpu", dtype=torch.int64)
        return pack(self._route_plan(), ids, lens), lens

    def _exchange_map(
        self, features: KeyedJaggedTensor | object, *, training: bool, owner: str
    ) -> dict[str, Tensor]:
        """Each table's `(N,)` global slots of this rank's ids of `features` (see `remap` and
        `_dynamic_exchange` for the buffers and flags)."""
        env = self._env
        plan = self._route_plan()
        names = list(self.tables)
        error: BaseException | None = precheck(features, self._features(), owner, names)
        packed = lens = None
        if error is None:
            assert isinstance(features, KeyedJaggedTensor)
            try:
                packed, lens = self._pack(features)
            except Exception as e:  # every rank must hear of it (no hang)
                error = e
        if packed is None or lens is None:
            packed = pack_refusal(plan)
        received, recv, counts = exchange_out(env, plan, packed, error)
        assert lens is not None
        failure: tuple[int, BaseException] | None = None
        found: list[Tensor] = []
        parts = [self._part(name) for name in names]
        for t, ids in enumerate(by_table(received, recv, counts)):
            parts[t].start_undo()  # taken back on every rank if any owner's map fails (undo.py)
            try:
                found.append(parts[t].map_local(ids, training=training))
            except Exception as e:  # flagged back, re-raised on every rank
                failure = failure or (t, e)
                found.append(torch.full_like(ids, -1))
        partitioned = [t for t, p in enumerate(plan.parts.tolist()) if p]
        try:
            back = exchange_back(env, owner, names, found, partitioned, counts, packed, failure)
        except BaseException:
            for part in parts:  # the batch was not seen: every map as before it
                part.rollback_step()
            raise
        for part in parts:
            part.commit_step()
        slots = back[packed.where] if partitioned else back
        out: dict[str, Tensor] = {}
        at = 0
        for t, (name, n) in enumerate(zip(names, lens, strict=True)):
            if t in partitioned:
                out[name] = slots[at : at + n]
            else:  # replicated: this rank's ids, among every rank's, mapped here
                start = sum(row[t] for row in counts[: env.rank])
                out[name] = found[t][start : start + n]
            at += n
        return out


def precheck(
    features: object, dynamic_features: Sequence[str], owner: str, tables: Sequence[str] = ()
) -> Exception | None:
    """What `DynamicTables.remap` would refuse before its exchanges (checked on every rank);
    `tables`: the dynamic tables' names, which the messages give."""
    if not isinstance(features, KeyedJaggedTensor):
        return TypeError(f"{owner}: expected a KeyedJaggedTensor, got {type(features).__name__}")
    values = features.values()
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        return TypeError(
            f"{owner}: ids must be an integer tensor, got values of dtype {values.dtype} "
            f"(dynamic table(s) {list(tables)} map raw ids); cast them with .long() if they are "
            "whole numbers (dynamic tables take any int64 value)"
        )
    keys = set(features.keys())
    missing = [f for f in dynamic_features if f not in keys]
    if missing:
        return ValueError(
            f"{owner}: the KeyedJaggedTensor lacks feature(s) {missing} that dynamic tables "
            f"read; it has keys {list(features.keys())}"
        )
    if features.variable_stride_per_key():
        return ValueError(
            f"{owner}: variable batch size per feature is not supported with dynamic tables"
        )
    return None
