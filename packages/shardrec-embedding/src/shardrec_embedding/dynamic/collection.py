"""`DynamicTables`: the raw-id tables of one collection, and the KJT remap around its lookup.

A collection with dynamic tables holds one `DynamicTables` (submodule `dynamic_tables`). Its
forward is then:

1. `remap(features, training)`: the ids of every feature a dynamic table reads become slots
   (`DynamicTable.map_ids`, one call per table and batch); ids without a slot are dropped
   from their bags, and a `Remapped` records what was dropped;
2. the collection's ordinary lookup on the remapped KJT (static and dynamic tables alike,
   so pooling, per-id weights, feature processors and fused optimizers work unchanged);
3. `fix_pooled` / `fix_sequence` give dropped ids what they read: a zero row (training; and
   evaluation with `UnknownIdPolicy.ZERO`) or the table's `default_row` (evaluation with
   DEFAULT_ROW). MEAN bags keep dividing by their full length. The fix is a differentiable
   rescale, so a dropped id receives no update and the others their exact gradients.

A feature a dynamic table reads must be read by no other table (its ids become that table's
slots).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import Tensor, nn

from shardrec_embedding.dynamic.config import UnknownIdPolicy
from shardrec_embedding.dynamic.id_map import IdMapBackend
from shardrec_embedding.dynamic.in_flight import hold_until_backward
from shardrec_embedding.dynamic.reset import init_rows_, table_seed
from shardrec_embedding.dynamic.table import DynamicTable, ResetHook
from shardrec_jagged import KeyedJaggedTensor

if TYPE_CHECKING:
    from shardrec_embedding.configs import BaseEmbeddingConfig

_Config = TypeVar("_Config", bound="BaseEmbeddingConfig")

__all__ = [
    "DroppedIds",
    "DynamicTables",
    "Remapped",
    "dynamic_configs",
    "dynamic_table_stats",
    "reset_rows_hook",
]


def dynamic_configs(tables: Sequence[_Config]) -> list[_Config]:
    """The tables of `tables` that are dynamic."""
    return [t for t in tables if t.dynamic is not None]


@dataclass(frozen=True)
class DroppedIds:
    """What one feature's remap dropped (ids without a slot).

    total: `(B,)` ids per bag before. kept: `(B,)` after. kept_positions: positions (within
    the feature) of the kept ids. default_weight: `(B,)` summed per-id weights of the dropped
    ids per bag when they read the default row, else None. default_row: `(D,)` or None.
    """

    total: Tensor
    kept: Tensor
    kept_positions: Tensor
    default_weight: Tensor | None
    default_row: Tensor | None


@dataclass(frozen=True)
class Remapped:
    """`features`: the KJT with slots for the dynamic features' ids; `dropped`: per feature
    with dropped ids, what `fix_pooled` / `fix_sequence` need; `raw_values`: the ids as given."""

    features: KeyedJaggedTensor
    dropped: Mapping[str, DroppedIds]
    raw_values: Tensor


def reset_rows_hook(
    weight: Callable[[], Tensor],
    config: BaseEmbeddingConfig,
    row_offset: int = 0,
    *,
    table: DynamicTable | None = None,
) -> ResetHook:
    """A reset hook writing the table's initializer into freed slots of `weight()` (rows
    `row_offset + slot`). With `table` and the default uniform initializer (no `init_fn`):
    the counter-based rows of (table seed, slot, `table.generation`) (`dynamic/reset.py`),
    written in place in one pass; otherwise `config.init_weight_` runs on a `(k, dim)`
    tensor (torch's RNG)."""
    counter_based = table is not None and config.init_fn is None
    seed = table_seed(table.config.init_seed, table.name) if table is not None else 0
    low, high = config.get_weight_init_min(), config.get_weight_init_max()

    def reset(slots: Tensor) -> None:
        w = weight()
        if counter_based:
            assert table is not None
            init_rows_(
                w,
                slots,
                row_offset=row_offset,
                seed=seed,
                generation=table.generation,
                low=low,
                high=high,
            )
            return
        with torch.no_grad():
            fresh = torch.empty(slots.numel(), w.shape[1], dtype=w.dtype, device=w.device)
            config.init_weight_(fresh)
            w[slots.to(w.device) + row_offset] = fresh

    return reset


def _optimizer_rows_hook(
    optimizer: torch.optim.Optimizer, weight: Callable[[], Tensor]
) -> ResetHook:
    def reset(slots: Tensor) -> None:
        param = weight()
        for group in optimizer.param_groups:
            if not any(p is param for p in group["params"]):
                continue
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if not isinstance(value, Tensor) or value.dim() == 0:
                    continue
                if value.shape[0] != param.shape[0]:
                    continue
                initial = group.get("initial_accumulator_value", 0.0) if key == "sum" else 0.0
                with torch.no_grad():
                    value[slots.to(value.device)] = initial

    return reset


class DynamicTables(nn.Module):
    """The `DynamicTable`s of a collection's dynamic tables (`tables[name]`).

    Args:
        configs: all the collection's table configs (static ones are skipped).
        owner: the collection's name, for messages.
        backend: the id maps' backend.
        make_table: builds each dynamic table's `DynamicTable` (default: one of the table's
            full capacity; a sharded collection builds its rank's part of it).
    """

    def __init__(
        self,
        configs: Sequence[BaseEmbeddingConfig],
        owner: str,
        backend: IdMapBackend = "auto",
        make_table: Callable[[BaseEmbeddingConfig], DynamicTable] | None = None,
    ) -> None:
        super().__init__()
        readers: dict[str, list[str]] = {}
        for t in configs:
            for f in t.feature_names:
                readers.setdefault(f, []).append(t.name)
        self._table_features: dict[str, list[str]] = {}
        self._configs = {t.name: t for t in configs}
        self._weights: dict[str, Callable[[], Tensor]] = {}
        self._unknown: dict[str, UnknownIdPolicy] = {}
        tables: dict[str, DynamicTable] = {}
        for t in dynamic_configs(configs):
            assert t.dynamic is not None
            for f in t.feature_names:
                if len(readers[f]) > 1:
                    raise ValueError(
                        f"{owner}: feature {f!r} is read by dynamic table {t.name!r} and by "
                        f"{[n for n in readers[f] if n != t.name]}; a dynamic table's feature "
                        "must be read by it alone (its ids become that table's slots): give the "
                        "other tables their own copy of the feature"
                    )
            tables[t.name] = (
                make_table(t)
                if make_table is not None
                else DynamicTable(
                    t.name, t.dynamic, t.num_embeddings, t.embedding_dim, backend=backend
                )
            )
            self._table_features[t.name] = list(t.feature_names)
            self._unknown[t.name] = t.dynamic.unknown_id
        self.tables = nn.ModuleDict(tables)

    def table(self, name: str) -> DynamicTable:
        found = self.tables[name]
        assert isinstance(found, DynamicTable)
        return found

    def bind_weight(self, name: str, weight: Callable[[], Tensor], row_offset: int = 0) -> None:
        """Table `name`'s rows are rows `row_offset + slot` of `weight()`: freed slots are
        reset to the table's initializer there, and `track_optimizer` finds the parameter."""
        self._weights[name] = weight
        table = self.table(name)
        table.add_reset_hook(reset_rows_hook(weight, self._configs[name], row_offset, table=table))

    def track_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Reset freed slots' rows in `optimizer`'s state too (dense-gradient training with a
        torch optimizer: its per-row state of a dynamic table's weight is reset to the
        optimizer's initial value whenever slots are freed). Fused collections reset their
        own state; this is for the unfused ones."""
        for name, weight in self._weights.items():
            self.table(name).add_reset_hook(_optimizer_rows_hook(optimizer, weight))

    def hold_until_backward(self, outputs: Iterable[Tensor]) -> None:
        """After a training lookup: the slots it read stay unevictable until the backward
        through `outputs` ran (a second training forward cannot take them; `in_flight.py`)."""
        if self.training:
            tables = [self.table(n) for n in self.tables]
            hold_until_backward([(t.in_flight, t.generation) for t in tables], outputs)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per dynamic table: occupancy, admissions, rejections, evictions, unknown reads..."""
        return {name: self.table(name).stats() for name in self.tables}

    def remap(self, features: KeyedJaggedTensor, *, training: bool, owner: str) -> Remapped:
        """The KJT with every dynamic feature's ids replaced by slots (see the module doc)."""
        values = features.values()
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise TypeError(
                f"{owner}: ids must be an integer tensor, got values of dtype {values.dtype} "
                f"(dynamic table(s) {list(self.tables)} map raw ids); cast them with .long() if "
                "they are whole numbers (dynamic tables take any int64 value)"
            )
        keys = features.keys()
        position = {k: i for i, k in enumerate(keys)}
        read = [f for feats in self._table_features.values() for f in feats]
        missing = [f for f in read if f not in position]
        if missing:
            raise ValueError(
                f"{owner}: the KeyedJaggedTensor lacks feature(s) {missing} that dynamic tables "
                f"read; it has keys {list(keys)}"
            )
        if features.variable_stride_per_key():
            raise ValueError(
                f"{owner}: variable batch size per feature is not supported with dynamic tables"
            )
        opk = features.offset_per_key()
        batch = features.stride()
        lengths = features.lengths()
        weights = features.weights_or_none()
        # Every span is written below when every feature is a dynamic table's: no copy first.
        out_values = torch.empty_like(values) if set(read).issuperset(keys) else values.clone()
        # int64 CPU ids: a one-feature table's map writes its slots straight into their span
        # and counts the ids it left without a slot (no copy, no pass over the slots after)
        direct = (
            values.dtype is torch.int64
            and values.device.type == "cpu"
            and out_values.is_contiguous()
        )
        keep: Tensor | None = None
        dropped_per_key = [0] * len(keys)
        new_lengths = lengths
        dropped: dict[str, DroppedIds] = {}
        for name, feats in self._table_features.items():
            table = self.table(name)
            spans = [(opk[position[f]], opk[position[f] + 1]) for f in feats]
            if direct and len(spans) == 1:
                a, b = spans[0]
                slots = out_values[a:b]
                none_dropped = table.map_ids_into(values[a:b], slots, training=training) == 0
            else:
                ids = (
                    torch.cat([values[a:b] for a, b in spans])
                    if len(spans) > 1
                    else (values[spans[0][0] : spans[0][1]])
                )
                slots = table.map_ids(ids, training=training).to(values.device)
                # one reduction, no mask, when every id has a slot (ids already in the table)
                none_dropped = slots.numel() == 0 or int(slots.min()) >= 0
                start = 0
                for a, b in spans:
                    out_values[a:b] = slots[start : start + b - a].to(values.dtype)
                    start += b - a
            if none_dropped:
                continue
            start = 0
            for f, (a, b) in zip(feats, spans, strict=True):
                part = slots[start : start + b - a]
                start += b - a
                miss = part < 0
                if not bool(miss.any()):
                    continue
                if keep is None:
                    keep = torch.ones(values.numel(), dtype=torch.bool, device=values.device)
                    new_lengths = lengths.clone()
                keep[a:b] = ~miss
                dropped_per_key[position[f]] = int(miss.sum())
                k = position[f]
                total = lengths[k * batch : (k + 1) * batch].to(torch.int64)
                bag = torch.repeat_interleave(torch.arange(batch, device=values.device), total)
                drops = torch.bincount(bag[miss], minlength=batch)
                kept = total - drops
                new_lengths[k * batch : (k + 1) * batch] = kept.to(lengths.dtype)
                default_weight = default_row = None
                if not training and self._unknown[name] is UnknownIdPolicy.DEFAULT_ROW:
                    w = (
                        weights[a:b][miss].float()
                        if weights is not None
                        else torch.ones(int(miss.sum()), device=values.device)
                    )
                    default_weight = torch.zeros(batch, device=values.device).index_add_(
                        0, bag[miss], w
                    )
                    default_row = table.default_row.to(values.device)
                dropped[f] = DroppedIds(
                    total=total,
                    kept=kept,
                    kept_positions=torch.nonzero(~miss).reshape(-1),
                    default_weight=default_weight,
                    default_row=default_row,
                )
        if keep is not None:
            out_values = out_values[keep]
            weights = None if weights is None else weights[keep]
        # The host-side metadata is known: pass it on, so the lookup does not recompute it.
        per_key = [b - a - d for a, b, d in zip(opk[:-1], opk[1:], dropped_per_key, strict=True)]
        remapped = KeyedJaggedTensor(
            keys=keys,
            values=out_values,
            weights=weights,
            lengths=new_lengths,
            offsets=features.offsets() if keep is None else None,
            stride=batch,
            length_per_key=per_key,
            offset_per_key=[sum(per_key[:i]) for i in range(len(per_key) + 1)],
        )
        return Remapped(features=remapped, dropped=dropped, raw_values=values)

    @staticmethod
    def fix_pooled(
        out: Tensor,
        remapped: Remapped,
        segments: Sequence[tuple[str, int, bool]],
    ) -> Tensor:
        """`out (B, sum dims)` with dropped ids' contributions made right.

        segments: per output block in order, `(feature, dim, mean)`.
        """
        if not remapped.dropped:
            return out
        blocks = list(torch.split_with_sizes(out, [d for _, d, _ in segments], dim=1))
        for i, (feature, _, mean) in enumerate(segments):
            info = remapped.dropped.get(feature)
            if info is None:
                continue
            block = blocks[i]
            total = info.total.clamp(min=1).to(block.dtype)
            if mean:
                block = block * (info.kept.to(block.dtype) / total).unsqueeze(1)
            if info.default_weight is not None and info.default_row is not None:
                weight = info.default_weight.to(block.dtype)
                if mean:
                    weight = weight / total
                block = block + weight.unsqueeze(1) * info.default_row.to(block.dtype)
            blocks[i] = block
        return torch.cat(blocks, dim=1)

    @staticmethod
    def fix_sequence(rows: Tensor, info: DroppedIds | None) -> Tensor:
        """One feature's `(N_kept, D)` rows as `(N, D)`: dropped ids read zeros / the default."""
        if info is None:
            return rows
        n = int(info.total.sum())
        if info.default_weight is not None and info.default_row is not None:
            full = info.default_row.to(rows.dtype).expand(n, rows.shape[1]).clone()
        else:
            full = rows.new_zeros(n, rows.shape[1])
        return full.index_copy(0, info.kept_positions, rows)


def dynamic_table_stats(model: nn.Module) -> dict[str, dict[str, int]]:
    """Every dynamic table's counters in `model` (`DynamicTable.stats`), keyed by table name,
    prefixed with its collection's module path when that is not `model` itself
    (`"sparse.ebc.t0"`)."""
    out: dict[str, dict[str, int]] = {}
    for path, module in model.named_modules():
        if isinstance(module, DynamicTables):
            owner = path.rsplit(".", 1)[0] if "." in path else ""
            for name, stats in module.stats().items():
                out[f"{owner}.{name}" if owner else name] = stats
    return out
