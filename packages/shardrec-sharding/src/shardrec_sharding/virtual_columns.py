"""Raw-id tiers of column-split tables (`column_wise`, `table_column_wise`): one tier per rank.

A column-split dynamic table's id map is replicated (dynamic.py): every rank maps every rank's
ids, all-gathered in rank order, as one step, and the slots it returns are what the ordinary
column-wise path sends to the column blocks. With a virtual-table kernel that map is each
rank's `RowCache` (virtual_tier.py), over the fused rows of the column blocks the rank holds
(merged, as the in-memory lookup merges them), and its store keeps those columns of every id
(`<dir>/rank-<r>/<table>`). The ranks agree on every slot without talking: each cache makes
the same decisions from the same inputs (the same ids in the same order, the same pins taken
by the same training maps and released by the same backward), so the same ids are evicted,
written back and read back on every rank, each rank moving its own columns
(docs/design/virtual-column-tiers.md). That needs a column block on every rank (a rank
without one would release its pins at another time): `check_blocks` refuses other plans.

An id the store never held reads the rank's columns of its initial row (`ColumnRows`), so
the blocks together hold exactly the unsharded tier's row. The optimizer state is the
in-memory column-split table's: row-wise state is one value per row of the rank's blocks.

Checkpoints hold one entry per column block (`block_entries`):

```
<prefix>tier.col<c>_<n>.in<g>.ids    (k,) int64    every id the store holds
<prefix>tier.col<c>_<n>.in<g>.rows   (k, n + s)    columns [c, c + n) of their weight and
                                                   optimizer state (s: n per elementwise
                                                   state, 1 per row-wise state)
```

`g` lists the column offsets of the saving rank's blocks (`0_4`: two blocks, at columns 0 and
4): a row-wise state belongs to that group, so it reloads only into a rank holding the same
blocks (elementwise state and weights reload into any plan whose blocks are saved blocks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from shardrec_planner import ShardingType
from shardrec_sharding.layout import TableSharding
from shardrec_tiered import RowCache, StoreLayout, initial_rows
from shardrec_tiered.checkpoint import is_streaming
from shardrec_tiered.raw_checkpoint import TIER, KeyValueSlice, empty, store_ids
from shardrec_tiered.raw_ids import KeyValueRows, RawIdRows

__all__ = [
    "COLUMN_SPLIT",
    "BlockSlice",
    "ColumnRows",
    "block_entries",
    "check_blocks",
    "load_blocks",
    "load_column_state",
    "local_columns",
    "plan_load",
    "saved_blocks",
]

COLUMN_SPLIT = (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


def check_blocks(t: TableSharding, world_size: int) -> None:
    """Refuse a column-split raw-id tier that leaves a rank without a column block (module
    docstring), with the fix."""
    holders = sorted({s.rank for s in t.shards if s.rows > 0 and s.cols > 0})
    if len(holders) != world_size:
        raise ValueError(
            f"table {t.name!r}: {t.sharding.compute_kernel.value!r} on a "
            f"{t.sharding_type.value} table needs a column block on every rank (each rank's "
            "row cache makes the id -> slot decisions the others follow); the plan puts its "
            f"blocks on ranks {holders} of {world_size}. Split the columns over every rank "
            f"(column_wise(ranks=list(range({world_size})), ...)), or plan it table_wise / "
            "row_wise"
        )


def local_columns(t: TableSharding, rank: int) -> tuple[tuple[int, int], ...]:
    """`(col_offset, cols)` of each column block `rank` holds of `t`, in local order."""
    local = t.local(rank)
    return () if local is None else local.column_blocks


class ColumnRows(RawIdRows):
    """The `RawIdRows` of a rank's column blocks: an id the store never held reads the blocks'
    columns of its full initial row and zero optimizer state (column `c` of an initial row
    does not depend on the row's width, so the rows are drawn only up to the last block's
    end)."""

    def __init__(
        self,
        kv: KeyValueRows,
        layout: StoreLayout,
        *,
        seed: int,
        low: float,
        high: float,
        blocks: Sequence[tuple[int, int]],
    ) -> None:
        super().__init__(kv, layout, seed=seed, low=low, high=high)
        self.span = max(c + n for c, n in blocks)
        self.columns = torch.cat([torch.arange(c, c + n) for c, n in blocks])

    def read(self, ids: np.ndarray) -> np.ndarray:
        rows, found = self.kv.get(ids)
        if found.all():
            return rows
        rows = np.array(rows, dtype=np.float32)
        new = ~found
        rows[new] = 0.0
        full = initial_rows(
            torch.from_numpy(ids[new]), self.span, seed=self.seed, low=self.low, high=self.high
        )
        rows[new, : self.layout.dim] = full[:, self.columns].numpy()
        return rows


def _block_columns(
    layout: StoreLayout, blocks: Sequence[tuple[int, int]], index: int
) -> tuple[Tensor, bool]:
    """Store-row positions of block `index`'s entry (its weight columns, then its part of each
    state block), and whether a row-wise state is among them."""
    start = sum(n for _, n in blocks[:index])
    width = blocks[index][1]
    parts = [torch.arange(start, start + width)]
    base, rowwise = layout.dim, False
    for _, w in layout.state:
        if w == layout.dim:
            parts.append(torch.arange(base + start, base + start + width))
        else:
            parts.append(torch.tensor([base]))
            rowwise = True
        base += w
    return torch.cat(parts), rowwise


def _stem(blocks: Sequence[tuple[int, int]], index: int) -> str:
    c, n = blocks[index]
    group = "_".join(str(o) for o, _ in blocks)
    return f"{TIER}col{c}_{n}.in{group}"


class BlockSlice(KeyValueSlice):
    """The `(k, width)` entry of one column block: `columns` of the store rows of `ids`.
    Loading patches those columns into the stored rows (read, patch, write)."""

    def __init__(self, store: RawIdRows, ids: Tensor, columns: Tensor) -> None:
        super().__init__(store, ids)
        self.columns = columns
        self.shape = torch.Size((self.ids.numel(), columns.numel()))

    def read_chunk(self, offsets: Sequence[int], sizes: Sequence[int]) -> Tensor:
        lo, n = int(offsets[0]), int(sizes[0])
        rows = torch.from_numpy(
            np.array(self.store.read(self.ids[lo : lo + n].numpy()), dtype=np.float32)
        )
        col = int(offsets[1])
        return rows[:, self.columns[col : col + int(sizes[1])]].contiguous()

    def write_region(self, offsets: Sequence[int], value: Tensor) -> None:
        lo, col = int(offsets[0]), int(offsets[1])
        ids = self.ids[lo : lo + value.shape[0]].numpy()
        if not ids.size:
            return
        rows = torch.from_numpy(np.array(self.store.read(ids), dtype=np.float32))
        rows[:, self.columns[col : col + value.shape[1]]] = value.detach().to(torch.float32)
        self.store.write(ids, rows.numpy())


def block_entries(
    cache: RowCache, prefix: str, blocks: Sequence[tuple[int, int]]
) -> dict[str, object]:
    """The state_dict entries of this rank's column blocks (module docstring)."""
    store = cache.store
    assert isinstance(store, RawIdRows)
    ids = store_ids(cache)
    out: dict[str, object] = {}
    for i in range(len(blocks)):
        rows = BlockSlice(store, ids, _block_columns(store.layout, blocks, i)[0])
        stem = prefix + _stem(blocks, i)
        out[f"{stem}.ids"] = ids
        out[f"{stem}.rows"] = rows if is_streaming() and ids.numel() else rows.read()
    return out


def saved_blocks(keys: Sequence[str], prefix: str) -> dict[tuple[int, int], tuple[str, str]]:
    """`(col_offset, cols)` -> `(stem after the prefix, group)` of the column-block entries
    among `keys` (their `.ids` keys)."""
    out: dict[tuple[int, int], tuple[str, str]] = {}
    for key in keys:
        if not (key.startswith(prefix + TIER + "col") and key.endswith(".ids")):
            continue
        stem = key[len(prefix) : -len(".ids")]
        block, _, group = stem[len(TIER) + len("col") :].partition(".in")
        c, _, n = block.partition("_")
        out[(int(c), int(n))] = (stem, group)
    return out


def plan_load(
    table: str,
    cache: RowCache,
    blocks: Sequence[tuple[int, int]],
    saved: Mapping[tuple[int, int], tuple[str, str]],
    widths: Mapping[str, int],
) -> tuple[list[tuple[str, Tensor]], Exception | None]:
    """For each local block, `(saved stem, store-row positions)`; or the error refusing the
    load: a block the checkpoint lacks, another row width, or a row-wise state saved by a rank
    holding other blocks (module docstring)."""
    store = cache.store
    assert isinstance(store, RawIdRows)
    group = "_".join(str(o) for o, _ in blocks)
    out = []
    for i, block in enumerate(blocks):
        columns, rowwise = _block_columns(store.layout, blocks, i)
        found = saved.get(block)
        if found is None:
            return [], ValueError(
                f"table {table!r}: the checkpoint holds column blocks "
                f"{sorted(saved)} (col_offset, cols) of this raw-id tier, this rank's plan "
                f"needs {block}; load it into a plan with the saved column blocks"
            )
        stem, saved_group = found
        width = widths.get(stem)
        if width != columns.numel():
            return [], ValueError(
                f"table {table!r}: column block {block} was saved with rows of {width} "
                f"columns, the table's have {columns.numel()} (weight and optimizer state); "
                "load it with the embedding_dim and optimizer it was saved with"
            )
        if rowwise and saved_group != group:
            return [], ValueError(
                f"table {table!r}: its row-wise optimizer state was saved per group of column "
                f"blocks at columns {saved_group.replace('_', ', ')} on one rank, this rank "
                f"holds blocks at {group.replace('_', ', ')}; a column-split table's row-wise "
                "state reloads only where each rank holds the blocks it was saved with (or use "
                "an optimizer without row-wise state)"
            )
        out.append((stem, columns))
    return out, None


def load_blocks(cache: RowCache, parts: Sequence[tuple[Tensor, Tensor, Tensor]]) -> None:
    """Replace the store's content by `(ids, rows, store-row positions)` of each local block
    (plain tensors: `load_state_dict`)."""
    store = cache.store
    assert isinstance(store, RawIdRows)
    empty(cache)
    for ids, rows, columns in parts:
        if ids.numel():
            BlockSlice(store, ids, columns).write_region((0, 0), rows)
    store.flush()


def load_column_state(
    table: str,
    cache: RowCache,
    blocks: Sequence[tuple[int, int]],
    state: dict[str, object],
    prefix: str,
) -> None:
    """A plain `load_state_dict` of column-block entries (popped from `state`): this rank's
    blocks replace its store's content (nothing happens when `state` has none)."""
    keys = [k for k in state if k.startswith(prefix + TIER)]
    saved = saved_blocks(keys, prefix)
    if not saved:
        return
    entries: dict[str, tuple[Tensor, Tensor]] = {}
    for stem, _ in saved.values():
        ids, rows = state.pop(prefix + stem + ".ids"), state.pop(prefix + stem + ".rows", None)
        if isinstance(rows, KeyValueSlice):
            rows = rows.read()
        if not isinstance(ids, Tensor) or not isinstance(rows, Tensor) or rows.dim() != 2:
            raise ValueError(f"table {table!r}: raw-id tier entry {stem!r} needs ids and rows")
        entries[stem] = (ids, rows)
    widths = {stem: int(rows.shape[1]) for stem, (_, rows) in entries.items()}
    plan, error = plan_load(table, cache, blocks, saved, widths)
    if error is not None:
        raise error
    load_blocks(cache, [(*entries[stem], columns) for stem, columns in plan])
