"""Raw-id tier tables (`ssd_virtual_table` / `dram_virtual_table`) in checkpoints.

`save` takes each tier's entries from the model's streaming state_dict: the ids its store
holds and a `KeyValueSlice` of their rows (weight and optimizer state), saved a chunk at a
time under `<table prefix>.tier.<rank>.ids` / `.rows` (shardrec_tiered.raw_checkpoint).

`load` leaves them out of the ordinary read (their number of ids is the saved one, not the
module's) and afterwards, for each tier table of the model:

```
saved tier.<r>.ids of every saved rank --read--> the owner empties its cache and store
--> tier.<r>.rows read piece by piece into the store under those ids (KeyValueSlice)
```

A table_wise table has one owner, so a load into another world size (the table on another
rank) reads every saved part into the new owner; a row_wise part keeps the ids its routing
hash now gives it (`owns`), so a row_wise table reshards to another world size too (a
column-split table's entries are per column block: checkpoint_virtual_columns.py). The
cached rows the ordinary read put into the table's fused rows are dropped with the cache: the
store is the truth.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from shardrec_collectives import agree_on_error
from shardrec_dmp.checkpoint_io import SafeReader
from shardrec_dmp.checkpoint_tiered import TieredLoadPlanner
from shardrec_dmp.checkpoint_virtual_columns import restore_column_tier
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_sharding.virtual_tier import TieredShardedDynamicTable, owns
from shardrec_tiered import RowCache
from shardrec_tiered.raw_checkpoint import TIER, KeyValueSlice, empty
from shardrec_tiered.raw_ids import RawIdRows

__all__ = ["flush_virtual", "restore_virtual_tiers", "strip_tiers", "virtual_tiers"]


def virtual_tiers(
    model: DistributedModelParallel,
) -> Iterator[tuple[str, TieredShardedDynamicTable]]:
    """`(state_dict prefix of its tier entries, part)` of every raw-id tier table of `model`."""
    for path, module in model.sharded_modules.items():
        tables = getattr(module, "dynamic_tables", None)
        if tables is None:
            continue
        for name in tables.tables:
            part = tables.table(name)
            if isinstance(part, TieredShardedDynamicTable):
                at = f"{path}." if path else ""  # "": the model is the collection
                yield f"{at}dynamic_tables.tables.{name}.{TIER}", part


def flush_virtual(model: DistributedModelParallel) -> None:
    """Write every owned tier cache's dirty rows back (before a save: `flush_tiered`)."""
    for _, part in virtual_tiers(model):
        if part.cache is not None:
            part.cache.flush()


def strip_tiers(state: dict[str, object], model: DistributedModelParallel) -> dict[str, object]:
    """`state` (`{"model": ..., "optimizers": ...}`) without the tier entries."""
    prefixes = tuple(prefix for prefix, _ in virtual_tiers(model))
    if not prefixes:
        return state
    current = state["model"]
    assert isinstance(current, Mapping)
    kept = {k: v for k, v in current.items() if not str(k).startswith(prefixes)}
    return {**state, "model": kept}


def restore_virtual_tiers(
    model: DistributedModelParallel,
    shapes: Mapping[str, tuple[int, ...]],
    reader: SafeReader,
    checkpoint: str,
) -> None:
    """Replace each tier table's store by the saved ids and rows (module docstring)."""
    env = model.env
    for prefix, part in virtual_tiers(model):
        if part.column_blocks:  # a column-split table: its entries are per column block
            restore_column_tier(prefix, part, shapes, reader, checkpoint, env)
            continue
        saved = sorted(
            k[len("model.") :]
            for k in shapes
            if k.startswith("model." + prefix) and k.endswith(".ids")
        )
        cache: RowCache | None = part.cache
        error: Exception | None = None
        # No tier entries (saved in memory): checkpoint_interchange loads it.
        stride = None if cache is None else cache.store.layout.stride
        for key in saved:
            rows = shapes.get("model." + key[: -len(".ids")] + ".rows")
            if stride is not None and (rows is None or rows[1:] != (stride,)):
                error = ValueError(
                    f"checkpoint {checkpoint!r}: table {part.name!r} has raw-id rows of shape "
                    f"{rows} saved, the table's rows have {stride} columns (weight and "
                    "optimizer state); load it with the embedding_dim and optimizer it was "
                    "saved with"
                )
        if cache is not None and bool((cache.pins > 0).any()):
            error = RuntimeError(
                f"table {part.name!r}: cannot load a checkpoint while batches in flight hold "
                "its cached rows (a train pipeline's mapped batches); finish them first, or "
                "drop them with release_tier_pins() on the table's part"
            )
        agree_on_error(env, error)
        if not saved:
            continue
        ids_target: dict[str, object] = {}
        if cache is not None:
            empty(cache)
            ids_target = {k: torch.zeros(shapes["model." + k], dtype=torch.int64) for k in saved}
        dcp_load(
            {"model": ids_target},
            storage_reader=reader,
            planner=TieredLoadPlanner(),
            process_group=env.pg,
        )
        rows_target: dict[str, object] = {}
        if cache is not None:
            store = cache.store
            assert isinstance(store, RawIdRows)
            for key, ids in ids_target.items():
                assert isinstance(ids, torch.Tensor)
                if ids.numel():
                    mine = owns(part, ids)  # a row_wise part keeps the ids it now owns
                    rows_target[key[: -len(".ids")] + ".rows"] = KeyValueSlice(store, ids, mine)
        dcp_load(
            {"model": rows_target},
            storage_reader=reader,
            planner=TieredLoadPlanner(),
            process_group=env.pg,
        )
        if cache is not None:
            cache.store.flush()
