"""Loading the column-block entries of a column-split raw-id tier (`column_wise`,
`table_column_wise` with `ssd_virtual_table` / `dram_virtual_table`).

Each rank's store holds its column blocks of every id (shardrec_sharding/virtual_columns.py);
the checkpoint one entry per column block (`tier.col<c>_<n>.in<g>.ids` / `.rows`). A load
gives each rank the saved blocks it holds now, whichever rank saved them (so a column_wise
table of 2 ranks loads into 1 rank holding both blocks):

```
saved col<c>_<n> ids --read--> the rank holding block (c, n) empties its cache and store
--> col<c>_<n> rows read piece by piece, patched into the columns of the store rows
```
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from shardrec_collectives import ShardingEnv, agree_on_error
from shardrec_dmp.checkpoint_io import SafeReader
from shardrec_dmp.checkpoint_tiered import TieredLoadPlanner
from shardrec_sharding.virtual_columns import BlockSlice, plan_load, saved_blocks
from shardrec_sharding.virtual_tier import TieredShardedDynamicTable
from shardrec_tiered.raw_checkpoint import TIER, empty
from shardrec_tiered.raw_ids import RawIdRows

__all__ = ["check_column_tier", "restore_column_tier"]


def check_column_tier(
    prefix: str,
    part: TieredShardedDynamicTable,
    shapes: Mapping[str, tuple[int, ...]],
    checkpoint: str,
    env: ShardingEnv,
) -> list[tuple[str, torch.Tensor]]:
    """For each of this rank's column blocks, `(saved stem, store-row positions)`; raises the
    refusal (a block the checkpoint lacks, another row width, a row-wise state of another
    block group, batches in flight) on every rank, before anything is read. `prefix`: the
    table's tier entries' (`<table prefix>tier.`)."""
    keys = [k[len("model.") :] for k in shapes if k.startswith("model." + prefix)]
    prefix = prefix[: -len(TIER)]  # the table's: the entries' stems start with the infix
    saved = saved_blocks(keys, prefix)
    widths = {
        stem: shapes["model." + prefix + stem + ".rows"][1]
        for stem, _ in saved.values()
        if "model." + prefix + stem + ".rows" in shapes
    }
    cache = part.cache
    error: Exception | None = None
    plan: list[tuple[str, torch.Tensor]] = []
    if cache is None:
        error = RuntimeError(f"table {part.name!r}: its raw-id tier has no cache on this rank")
    elif not saved:
        what = "other raw-id tier entries" if keys else "no tier entries"
        error = ValueError(
            f"checkpoint {checkpoint!r}: table {part.name!r} was not saved as a column-split "
            f"raw-id tier ({what}: saved table_wise / row_wise, or in memory); load it into "
            "the plan it was saved with"
        )
    else:
        plan, error = plan_load(part.name, cache, part.column_blocks, saved, widths)
        if error is not None:
            error = ValueError(f"checkpoint {checkpoint!r}: {error}")
    if error is None and cache is not None and bool((cache.pins > 0).any()):
        error = RuntimeError(
            f"table {part.name!r}: cannot load a checkpoint while batches in flight hold "
            "its cached rows (a train pipeline's mapped batches); finish them first, or "
            "drop them with release_tier_pins() on the table's part"
        )
    agree_on_error(env, error)
    return plan


def restore_column_tier(
    prefix: str,
    part: TieredShardedDynamicTable,
    shapes: Mapping[str, tuple[int, ...]],
    reader: SafeReader,
    checkpoint: str,
    env: ShardingEnv,
) -> None:
    """Replace this rank's store of `part` by its saved column blocks (module docstring);
    refusals are raised on every rank before anything is read (`check_column_tier`)."""
    plan = check_column_tier(prefix, part, shapes, checkpoint, env)
    prefix = prefix[: -len(TIER)]
    cache = part.cache
    assert cache is not None
    empty(cache)
    ids = {
        prefix + stem + ".ids": torch.zeros(
            shapes["model." + prefix + stem + ".ids"], dtype=torch.int64
        )
        for stem, _ in plan
    }
    dcp_load(
        {"model": dict(ids)},
        storage_reader=reader,
        planner=TieredLoadPlanner(),
        process_group=env.pg,
    )
    store = cache.store
    assert isinstance(store, RawIdRows)
    rows: dict[str, object] = {
        prefix + stem + ".rows": BlockSlice(store, ids[prefix + stem + ".ids"], columns)
        for stem, columns in plan
        if ids[prefix + stem + ".ids"].numel()
    }
    dcp_load(
        {"model": rows},
        storage_reader=reader,
        planner=TieredLoadPlanner(),
        process_group=env.pg,
    )
    store.flush()
