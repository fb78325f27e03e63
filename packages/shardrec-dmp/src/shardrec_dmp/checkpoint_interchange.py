"""Dynamic tables saved in memory load into a raw-id tier, and raw-id tiers into memory.

A dynamic table planned `fused` (in memory) saves its slots (`<name>.weight`, the id map's
`slot_ids` / `occupied` / `last_seen` / `counts`, the optimizer state per slot); the same table
planned `ssd_virtual_table` / `dram_virtual_table` saves every id its store holds with its row
(`tier.<rank>.ids` / `.rows`: weight, then optimizer state columns; checkpoint_virtual). `load`
finds the tables whose checkpoint is of the other kind (`plan_swaps`), leaves them out of the
ordinary read (and of checkpoint_dynamic's moves), and afterwards (`apply_swaps`):

```
in memory -> tier:  saved weight, slot_ids, occupied, optimizer state --read whole--> ids of
    the occupied slots, rows = weight | state columns (the tier's order) --> the owner keeps
    the ids it owns (row_wise: routing hash), empties its cache and store, puts them
tier -> in memory:  every saved rank's tier ids and rows --read whole--> slot_ids = ids,
    weight / optimizer state split from the rows, last_seen 0, counts 1 (the tier keeps no
    policy metadata) --> checkpoint_dynamic's restore (each part keeps the ids it owns; more
    than its slots: an error naming table, ids and capacity, or evict_to_fit, which then
    finds every id tied and keeps the largest ids)
```

Ids the in-memory table never admitted are absent from the store: the tier's unseen ids read
their initial row, as the in-memory table's unseen ids do. Any world size, table_wise or
row_wise on either side. Refused on every rank before anything is read: another
embedding_dim, another optimizer (state columns), more saved ids than the whole in-memory table
holds (unless `evict_to_fit`), a column_wise in-memory table with a row-wise optimizer (its
state is per column block). A column-split tier (checkpoint_virtual_columns) does not swap:
its checkpoint into memory is refused here, an in-memory one into it there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from shardrec_collectives import ShardingEnv, agree_on_error
from shardrec_dmp.checkpoint_dynamic import DynamicMove, dynamic_parts, restore
from shardrec_dmp.checkpoint_io import SafeReader
from shardrec_dmp.checkpoint_tiered import TieredLoadPlanner
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_optim import state_shapes
from shardrec_sharding.virtual_tier import TieredShardedDynamicTable, owns
from shardrec_tiered.raw_checkpoint import TIER, empty, join_rows, split_rows
from shardrec_tiered.raw_ids import RawIdRows

__all__ = ["Swap", "apply_swaps", "plan_swaps"]

_COLUMN_SPLIT = ("column_wise", "table_column_wise")


@dataclasses.dataclass(frozen=True, eq=False)
class Swap:
    """One dynamic table whose checkpoint is of the other kind (module docstring)."""

    move: DynamicMove  # its keys (what the ordinary read leaves out), collection, part
    into_tier: bool  # saved in memory, loaded into a raw-id tier (else the reverse)
    saved: tuple[str, ...]  # the checkpoint's keys of the table's rows (without "model.")
    column_split: bool = False  # the module's in-memory table is split into column blocks

    @property
    def name(self) -> str:
        return self.move.table.name


def _tier_keys(shapes: Mapping[str, tuple[int, ...]], move: DynamicMove) -> list[str]:
    start = f"model.{move.map_prefix}{TIER}"
    return sorted(k[len("model.") :] for k in shapes if k.startswith(start) and k.endswith(".ids"))


def plan_swaps(
    model: DistributedModelParallel,
    shapes: Mapping[str, tuple[int, ...]],
    checkpoint: str,
    *,
    evict_to_fit: bool = False,
) -> list[Swap]:
    """The dynamic tables of `model` saved as the other kind; `ValueError` (the same on every
    rank: from the checkpoint's shapes and the tables' configs) for another embedding_dim, or
    more saved ids than an in-memory table's capacity unless `evict_to_fit`; then, agreed by
    every rank (a collective), another optimizer or a tier's rows pinned by batches in
    flight."""
    swaps: list[Swap] = []
    for path, container, module, name, part in dynamic_parts(model):
        move = DynamicMove(path, container, module, part, 0)
        tier = _tier_keys(shapes, move)
        weight = shapes.get("model." + move.weight_key)
        dim = int(part.default_row.numel())
        if isinstance(part, TieredShardedDynamicTable):
            if tier or weight is None or part.column_blocks:
                continue  # a tier's checkpoint (checkpoint_virtual), none of it, or a
                # column-split tier (checkpoint_virtual_columns refuses other kinds)
            swap = Swap(move, True, (move.weight_key,))
            saved_dim = weight[1]
        else:
            if not tier:
                continue
            if any(k[len(move.map_prefix + TIER) :].startswith("col") for k in tier):
                raise ValueError(
                    f"checkpoint {checkpoint!r}: table {name!r} was saved as a "
                    "column-split raw-id tier (entries per column block); it loads into "
                    "the column_wise / table_column_wise tier plan it was saved with, not "
                    "into an in-memory table"
                )
            ps = model.plan.plan[path][name]
            split = ps.sharding_type in _COLUMN_SPLIT and len(ps.ranks or ()) > 1
            swap = Swap(move, False, tuple(tier), column_split=split)
            row = shapes.get(f"model.{move.map_prefix}default_row")  # (dim,): both kinds
            saved_dim = dim if row is None else row[0]
            n = sum(shapes["model." + k][0] for k in tier)
            if n > part.table_capacity and not evict_to_fit:
                raise ValueError(
                    f"checkpoint {checkpoint!r}: table {name!r} was saved as a raw-id tier "
                    f"holding {n} ids, the in-memory dynamic table has capacity "
                    f"{part.table_capacity}; give it num_embeddings >= {n}, or load with "
                    "evict_to_fit=True to keep as many as fit (the tier saves no policy "
                    "metadata: every id ties and the largest ids are kept; docs/dynamic.md)"
                )
        if saved_dim != dim:
            raise ValueError(
                f"checkpoint {checkpoint!r}: dynamic table {name!r} was saved with "
                f"embedding_dim {saved_dim}, the module's is {dim}; build the table with "
                f"embedding_dim={saved_dim} to load it"
            )
        swaps.append(swap)
    if swaps:  # the same list on every rank: each agrees, before anything is read
        errors = [e for e in (_refusal(sw, shapes) for sw in swaps) if e is not None]
        agree_on_error(model.env, errors[0] if errors else None)
    return swaps


def _state_columns(swap: Swap) -> tuple[tuple[str, int], ...] | None:
    """`(name, width)` of the table's optimizer state columns in row order, on the ranks that
    hold a part of it (None elsewhere)."""
    part = swap.move.table
    if isinstance(part, TieredShardedDynamicTable):
        cache = part.cache
        return None if cache is None else tuple(cache.store.layout.state)
    lookups = swap.move.collection._lookup_modules_of(part.name)
    if not lookups:
        return None
    dim = int(part.default_row.numel())
    shapes = state_shapes(lookups[0][0].spec.optimizer, 1, dim)
    return tuple((n, dim if len(s) == 2 else 1) for n, s in shapes.items())


def _saved_state(shapes: Mapping[str, tuple[int, ...]], move: DynamicMove) -> dict[str, str]:
    """State name -> the checkpoint key of the table's saved optimizer state (in memory)."""
    infix = f".state.{move.weight_key}.{move.table.name}."
    out: dict[str, str] = {}
    for key in sorted(shapes):
        at = key.find(infix)
        if key.startswith("optimizers.") and at >= 0:
            out.setdefault(key[at + len(infix) :], key)
    return out


def _read(
    keys: Mapping[str, tuple[tuple[int, ...], torch.dtype]], reader: SafeReader, env: ShardingEnv
) -> dict[str, Tensor]:
    """The tensors of the checkpoint's `keys` (full DCP keys), read whole on every rank."""
    target: dict[str, object] = {
        k: torch.zeros(shape, dtype=dtype) for k, (shape, dtype) in keys.items()
    }
    dcp_load(target, storage_reader=reader, planner=TieredLoadPlanner(), process_group=env.pg)
    return {k: v for k, v in target.items() if isinstance(v, Tensor)}


def _mismatch(
    name: str, saved: Sequence[tuple[str, int]], mine: Sequence[tuple[str, int]], kind: str
) -> ValueError:
    return ValueError(
        f"table {name!r}: its checkpoint ({kind}) holds optimizer state {list(saved)} "
        f"(name, columns), the table's optimizer keeps {list(mine)}; load it into a table "
        "with the optimizer it was saved with"
    )


def _column_blocks(name: str) -> ValueError:
    return ValueError(
        f"table {name!r}: placed column_wise in memory, its row-wise optimizer state is one "
        "value per column block, a raw-id tier keeps one per row; move it between a tier and "
        "a table_wise / row_wise placement (or use an optimizer with per-element state)"
    )


def _refusal(swap: Swap, shapes: Mapping[str, tuple[int, ...]]) -> Exception | None:
    """Why this rank cannot load `swap`'s table (its optimizer state columns differ from the
    checkpoint's; a tier's pinned rows), or None; only the ranks holding a part know."""
    move, part = swap.move, swap.move.table
    columns = _state_columns(swap)
    if columns is None:
        return None
    dim = int(part.default_row.numel())
    if swap.into_tier:
        state_keys = _saved_state(shapes, move)
        saved = [(n, 1 if len(shapes[k]) == 1 else shapes[k][1]) for n, k in state_keys.items()]
        if sorted(saved) != sorted(columns):
            split = any(w not in (1, dim) for _, w in saved)
            return (
                _column_blocks(part.name)
                if split
                else _mismatch(part.name, saved, columns, "saved in memory")
            )
        cache = getattr(part, "cache", None)
        if cache is not None and bool((cache.pins > 0).any()):
            return RuntimeError(
                f"table {part.name!r}: cannot load a checkpoint while batches in flight hold "
                "its cached rows (a train pipeline's mapped batches); finish them first, or "
                "drop them with release_tier_pins() on the table's part"
            )
        return None
    if swap.column_split and any(w == 1 for _, w in columns):
        return _column_blocks(part.name)
    widths = {shapes.get("model." + k[: -len(".ids")] + ".rows", (0, dim))[1] for k in swap.saved}
    if widths != {dim + sum(w for _, w in columns)}:
        return ValueError(
            f"table {part.name!r}: its checkpoint (a raw-id tier) has rows of {sorted(widths)} "
            f"columns, the in-memory table's are {dim} weight columns and optimizer state "
            f"{list(columns)} (name, columns); load it into a table with the optimizer it was "
            "saved with"
        )
    return None


def _into_tier(
    env: ShardingEnv, swap: Swap, shapes: Mapping[str, tuple[int, ...]], reader: SafeReader
) -> None:
    move = swap.move
    part = move.table
    assert isinstance(part, TieredShardedDynamicTable)
    weight_key = "model." + move.weight_key
    cap, dim = shapes[weight_key]
    state_keys = _saved_state(shapes, move)
    columns = _state_columns(swap)
    cache = part.cache
    prefix = "model." + move.map_prefix
    keys = {
        weight_key: ((cap, dim), torch.float32),
        prefix + "slot_ids": ((cap,), torch.int64),
        prefix + "occupied": ((cap,), torch.bool),
        **{k: (shapes[k], torch.float32) for k in state_keys.values()},
    }
    saved = _read(keys, reader, env)
    if cache is None or columns is None:
        return  # another rank owns the table (it read along: the load is collective)
    slots = torch.nonzero(saved[prefix + "occupied"]).reshape(-1)
    ids = saved[prefix + "slot_ids"][slots]
    rows = join_rows(
        saved[weight_key][slots], {n: saved[k][slots] for n, k in state_keys.items()}, columns
    )
    mine = owns(part, ids)
    store = cache.store
    assert isinstance(store, RawIdRows)
    empty(cache)
    if bool(mine.any()):
        store.write(ids[mine].numpy(), rows[mine].numpy())
    store.flush()


def _from_tier(
    env: ShardingEnv,
    swap: Swap,
    shapes: Mapping[str, tuple[int, ...]],
    reader: SafeReader,
    *,
    evict_to_fit: bool,
) -> None:
    move = swap.move
    part = move.table
    dim = int(part.default_row.numel())
    keys: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for k in swap.saved:
        rows_key = "model." + k[: -len(".ids")] + ".rows"
        keys["model." + k] = (shapes["model." + k], torch.int64)
        keys[rows_key] = (shapes.get(rows_key, (shapes["model." + k][0], dim)), torch.float32)
    columns = _state_columns(swap)
    stride = max((shape[1] for shape, _ in keys.values() if len(shape) == 2), default=dim)
    held = [k for k in swap.saved if shapes["model." + k][0] > 0]  # (a rank's empty store)
    wanted = {k: v for k, v in keys.items() if v[0][0] > 0}
    saved = _read(wanted, reader, env) if wanted else {}
    ids = torch.cat([torch.zeros(0, dtype=torch.int64)] + [saved["model." + k] for k in held])
    rows = torch.cat(
        [torch.zeros(0, stride)] + [saved["model." + k[: -len(".ids")] + ".rows"] for k in held]
    )
    ids, order = torch.sort(ids)  # evict_to_fit breaks the policy's ties by id order
    rows, n = rows[order], ids.numel()
    weight, state = split_rows(rows, dim, columns or ())
    table = {
        move.weight_key: weight,
        move.map_prefix + "slot_ids": ids,
        move.map_prefix + "occupied": torch.ones(n, dtype=torch.bool),
        move.map_prefix + "last_seen": torch.zeros(n, dtype=torch.int64),  # no metadata saved
        move.map_prefix + "counts": torch.ones(n, dtype=torch.int64),
    }
    named = {f"{part.name}.{k}": v for k, v in state.items()}
    restore(
        env, dataclasses.replace(move, saved_capacity=n), table, named, evict_to_fit=evict_to_fit
    )


def apply_swaps(
    model: DistributedModelParallel,
    swaps: Sequence[Swap],
    shapes: Mapping[str, tuple[int, ...]],
    reader: SafeReader,
    *,
    evict_to_fit: bool = False,
) -> None:
    """Load each swapped table from its checkpoint of the other kind (module docstring)."""
    for swap in swaps:
        if swap.into_tier:
            _into_tier(model.env, swap, shapes, reader)
        else:
            _from_tier(model.env, swap, shapes, reader, evict_to_fit=evict_to_fit)
