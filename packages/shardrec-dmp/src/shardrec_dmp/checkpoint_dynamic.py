"""Dynamic (raw-id) tables loaded into another layout: re-partitioned by their routing (the
hash of their ids, or, for a bucketed table, their bucket: `shardrec_sharding.id_buckets`).

A dynamic table's rows are keyed by slot, and its slots depend on the layout (a row-wise
table's rank owns the ids of its hash part in its own row block). A checkpoint loaded under
the *same* plan, world size and capacity reads each part back in place (bit for bit). Under
another one, the table's saved state is read whole on every rank (rows, id map, per-row
optimizer state), and each rank keeps the ids its map now owns:

```
saved (ids, rows, state) --read whole--> keep ids with routing.part_of(id) == my part (all when
replicated) --> load_items(ids, slots 0..k-1) + rows + optimizer rows; other slots reset
```

Counters restart, except `steps`, which continues from the last step any saved id was seen
(so TTL and LRU ages carry over). A table saved with more slots than the module has, or
another row width, is refused before anything is read, on every rank.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from shardrec_collectives import ShardingEnv, agree_on_error
from shardrec_dmp.checkpoint_io import SafePlanner, SafeReader
from shardrec_dmp.checkpoint_virtual_columns import check_column_tier
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_sharding.dynamic import ShardedDynamicTable
from shardrec_sharding.virtual_tier import TieredShardedDynamicTable

__all__ = ["DynamicMove", "apply_moves", "plan_moves", "restore", "strip_moved"]

_MAP_BUFFERS = ("slot_ids", "occupied", "last_seen", "counts", "free_slots", "sketch")


def _at(path: str) -> str:
    """The state_dict prefix of the module at `path` ("" when the model is the module)."""
    return f"{path}." if path else ""


@dataclasses.dataclass(frozen=True, eq=False)
class DynamicMove:
    """One dynamic table whose saved layout differs from the module's."""

    path: str  # the sharded collection's module path (a plan key)
    container: str  # embedding_bags / embeddings
    collection: Any  # the DynamicSharded* collection
    table: ShardedDynamicTable
    saved_capacity: int

    @property
    def weight_key(self) -> str:
        return f"{_at(self.path)}{self.container}.{self.table.name}.weight"

    @property
    def map_prefix(self) -> str:
        return f"{_at(self.path)}dynamic_tables.tables.{self.table.name}."

    def owns_model_key(self, key: str) -> bool:
        return key == self.weight_key or (
            key.startswith(self.map_prefix) and key[len(self.map_prefix) :] in _MAP_BUFFERS
        ) or key == self.map_prefix + "_extra_state"  # fmt: skip

    def owns_optimizer_key(self, key: str) -> bool:
        return str(key).endswith(f"{self.container}.{self.table.name}.weight")


def dynamic_parts(
    model: DistributedModelParallel,
) -> Iterator[tuple[str, str, torch.nn.Module, str, ShardedDynamicTable]]:
    """Every dynamic table part of `model`: (module path, its table container's name, the
    sharded module, the table's name, this rank's part)."""
    for path, module in model.sharded_modules.items():
        tables = getattr(module, "dynamic_tables", None)
        if tables is None:
            continue
        container = getattr(module, "_prefix", "embedding_bags")
        for name in tables.tables:
            part = tables.table(name)
            assert isinstance(part, ShardedDynamicTable)
            yield path, container, module, name, part


def plan_moves(
    model: DistributedModelParallel,
    meta: Mapping[str, object],
    shapes: Mapping[str, tuple[int, ...]],
    checkpoint: str,
    *,
    evict_to_fit: bool = False,
    skip: Collection[str] = (),
) -> list[DynamicMove]:
    """The dynamic tables of `model` to re-partition; `ValueError` (the same on every rank)
    for a saved table of another width, or of more slots unless `evict_to_fit`. Tables whose
    weight key is in `skip` are left out (checkpoint_interchange loads them)."""
    saved_plan = meta.get("plan")
    saved = saved_plan.get("plan", {}) if isinstance(saved_plan, Mapping) else {}
    current = json.loads(model.plan.to_json())["plan"]
    moves: list[DynamicMove] = []
    for path, container, module, name, part in dynamic_parts(model):
        if isinstance(part, TieredShardedDynamicTable) and part.column_blocks:
            # a column-split raw-id tier: its store is loaded per column block
            # (checkpoint_virtual_columns), the cached rows dropped; refusals come first
            prefix = f"{_at(path)}dynamic_tables.tables.{name}.tier."
            check_column_tier(prefix, part, shapes, checkpoint, model.env)
            continue
        key = f"model.{_at(path)}{container}.{name}.weight"
        shape = shapes.get(key)
        if key[len("model.") :] in skip:
            continue
        if shape is None:
            continue  # not in the checkpoint: DCP names the missing key
        capacity, dim = part.table_capacity, int(part.default_row.numel())
        if shape[1] != dim:
            raise ValueError(
                f"checkpoint {checkpoint!r}: dynamic table {name!r} was saved with "
                f"embedding_dim {shape[1]}, the module's is {dim}; build the table with "
                f"embedding_dim={shape[1]} to load it"
            )
        if shape[0] > capacity and not evict_to_fit:
            raise ValueError(
                f"checkpoint {checkpoint!r}: dynamic table {name!r} was saved with "
                f"capacity {shape[0]}, the module has {capacity}; a smaller table cannot "
                f"hold every saved id: give it num_embeddings >= {shape[0]}, or load with "
                "evict_to_fit=True to keep the ids its eviction policy ranks highest"
            )
        same = (
            shape[0] == capacity
            and saved.get(path, {}).get(name) == current.get(path, {}).get(name)
            and meta.get("world_size") == model.env.world_size
        )
        if not same:
            moves.append(DynamicMove(path, container, module, part, shape[0]))
    return moves


def strip_moved(state: dict[str, object], moves: list[DynamicMove]) -> dict[str, object]:
    """`state` (`{"model": ..., "optimizers": ...}`) without the moved tables' entries (they
    are read whole afterwards), so DCP loads the rest as usual."""
    model = state["model"]
    assert isinstance(model, Mapping)
    kept_model = {k: v for k, v in model.items() if not any(m.owns_model_key(k) for m in moves)}
    optimizers = state["optimizers"]
    assert isinstance(optimizers, Mapping)
    kept_opts: dict[str, object] = {}
    for name, sd in optimizers.items():
        if isinstance(sd, Mapping) and isinstance(sd.get("state"), Mapping):
            inner = {
                k: v
                for k, v in sd["state"].items()
                if not any(m.owns_optimizer_key(k) for m in moves)
            }
            kept_opts[name] = {**sd, "state": inner}
        else:
            kept_opts[name] = sd
    return {"model": kept_model, "optimizers": kept_opts}


def apply_moves(
    model: DistributedModelParallel,
    moves: list[DynamicMove],
    optimizer_names: list[str],
    shapes: Mapping[str, tuple[int, ...]],
    reader: SafeReader,
    *,
    evict_to_fit: bool = False,
) -> None:
    """Read the moved tables whole and give each rank the ids its maps own (module doc)."""
    env: ShardingEnv = model.env
    target: dict[str, object] = {"model": {}, "optimizers": {}}
    model_t = target["model"]
    assert isinstance(model_t, dict)
    opt_state: dict[tuple[int, str], Tensor] = {}
    for k, m in enumerate(moves):
        cap, dim = m.saved_capacity, int(m.table.default_row.numel())
        model_t[m.weight_key] = torch.zeros(cap, dim)
        model_t[m.map_prefix + "slot_ids"] = torch.zeros(cap, dtype=torch.int64)
        model_t[m.map_prefix + "occupied"] = torch.zeros(cap, dtype=torch.bool)
        model_t[m.map_prefix + "last_seen"] = torch.zeros(cap, dtype=torch.int64)
        model_t[m.map_prefix + "counts"] = torch.zeros(cap, dtype=torch.int64)
        for opt in optimizer_names:
            start = f"optimizers.{opt}.state."
            for full, shape in shapes.items():
                if not full.startswith(start):
                    continue
                rest = full[len(start) :]
                suffix = f"{m.container}.{m.table.name}.weight."
                at = rest.find(suffix)
                if at < 0 or shape[0] != cap:
                    continue
                if len(shape) == 2 and shape[1] != dim:
                    raise ValueError(
                        f"dynamic table {m.table.name!r}: its optimizer state {rest!r} was saved "
                        "per column shard holder; it reloads under the same plan only"
                    )
                tensor = torch.zeros(shape)
                opt_state[(k, rest[at + len(suffix) :])] = tensor
                node = target["optimizers"]
                assert isinstance(node, dict)
                node = node.setdefault(opt, {}).setdefault("state", {})
                node = node.setdefault(rest[: at + len(suffix) - 1], {})
                node[rest[at + len(suffix) :]] = tensor
    dcp_load(target, storage_reader=reader, planner=SafePlanner(), process_group=env.pg)
    for k, m in enumerate(moves):
        state = {n: t for (i, n), t in opt_state.items() if i == k}
        restore(env, m, model_t, state, evict_to_fit=evict_to_fit)


def _keep_by_policy(part: ShardedDynamicTable, last_seen: Tensor, counts: Tensor) -> Tensor:
    """The positions of the `part.capacity` entries the table's eviction policy keeps (LRU /
    TTL: the most recently seen; LFU: the most often seen, then the most recent), in order."""
    order = torch.argsort(last_seen, stable=True)
    if part.config.eviction.value == "LFU":
        order = order[torch.argsort(counts[order], stable=True)]
    return torch.sort(order[order.numel() - part.capacity :]).values


def restore(
    env: ShardingEnv,
    m: DynamicMove,
    saved: Mapping[str, object],
    state: Mapping[str, Tensor],
    *,
    evict_to_fit: bool,
) -> None:
    """Give this rank's part of `m`'s table the ids it owns of `saved` (model keys: weight,
    slot_ids, occupied, last_seen, counts, `m.saved_capacity` entries) with their rows and
    optimizer state (`state`: `<table>.<state name>`); the part's other slots are reset."""
    part = m.table
    occupied = saved[m.map_prefix + "occupied"]
    assert isinstance(occupied, Tensor)
    slots = torch.nonzero(occupied).reshape(-1)
    ids = _tensor(saved, m.map_prefix + "slot_ids")[slots]
    routing = part.routing
    if routing.replicated:
        mine = torch.ones_like(ids, dtype=torch.bool)
    elif env.rank in routing.owners:
        mine = routing.part_of(ids) == routing.owners.index(env.rank)
    else:
        mine = torch.zeros_like(ids, dtype=torch.bool)
    slots, ids = slots[mine], ids[mine]
    n = ids.numel()
    last_seen = _tensor(saved, m.map_prefix + "last_seen")
    error = None
    evictable = evict_to_fit and part.config.eviction.value != "NONE"
    if n > part.capacity and not evictable:
        error = ValueError(
            f"dynamic table {part.name!r}: {n} saved ids belong to rank {env.rank}'s part of "
            f"{part.capacity} slots; give the table more capacity (num_embeddings) to load it "
            "under this plan"
            + ("" if evict_to_fit else ", or load with evict_to_fit=True")
            + (" (its eviction policy is NONE: nothing to evict by)" if evict_to_fit else "")
        )
    agree_on_error(env, error)
    dropped = 0
    if n > part.capacity:
        keep = _keep_by_policy(
            part, last_seen[slots], _tensor(saved, m.map_prefix + "counts")[slots]
        )
        dropped = n - keep.numel()
        slots, ids, n = slots[keep], ids[keep], keep.numel()
    local = torch.arange(n, dtype=torch.int64)
    part.load_items(
        ids,
        local,
        last_seen=last_seen[slots],
        counts=_tensor(saved, m.map_prefix + "counts")[slots],
    )
    part._counters["steps"] = int(last_seen.max()) if last_seen.numel() else 0
    part._counters["admissions"] = n
    part._counters["evictions"] = dropped
    fresh = torch.arange(n, part.capacity, dtype=torch.int64)
    for hook in part._reset_hooks:  # rows and optimizer state of the slots left empty
        hook(fresh)
    tables: list[Any] = m.collection._tables
    layout = next(t for t in tables if t.name == part.name).local(env.rank)
    container = getattr(m.collection, m.container)
    if layout is None or part.name not in container:
        return
    weight = container[part.name].weight
    rows = _tensor(saved, m.weight_key)[slots]
    with torch.no_grad():
        weight[local] = torch.cat([rows[:, c : c + w] for c, w in layout.column_blocks], dim=1)
        for module in m.collection._lookup_modules_of(part.name):
            fused, offset = module
            for name, tensor in fused.optimizer_state().items():
                value = state.get(f"{part.name}.{name}")
                if value is None:
                    continue
                value = value[slots]
                if value.dim() == 2:
                    value = torch.cat([value[:, c : c + w] for c, w in layout.column_blocks], dim=1)
                tensor[local + offset] = value.to(tensor.dtype)


def _tensor(saved: Mapping[str, object], key: str) -> Tensor:
    value = saved[key]
    assert isinstance(value, Tensor)
    return value
