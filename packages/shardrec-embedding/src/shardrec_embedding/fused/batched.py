"""`BatchedFusedEmbeddingBag`: tables sharing (dim, pooling) in one packed FP32 weight, trained
by an optimizer fused into backward.

The building block of `FusedEmbeddingBagCollection` and of sharded lookups (which build it
from the *local shards* of tables): it knows tables only as `FusedTableSpec`s and ids only as
group rows (table-local id + the table's row offset, see `shift_ids`).

```
packed weight (total_rows, D)       optimizer state (same rows; see shardrec_optim tables)
  [0, r0)          table 0            momentum1 (total_rows, D) or (total_rows,)
  [r0, r0 + r1)    table 1            momentum2 ...
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from shardrec_embedding.batched_lookup import (
    allocate_packed,
    batched_embedding_bag,
    packed_weight,
    repack_,
)
from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.fused.lookup import FusedLookupFunction
from shardrec_embedding.fused.tables import FusedTableSpec
from shardrec_embedding.memory import huge_pages
from shardrec_optim import FusedEmbeddingOptimizer, FusedOptimSpec, init_state

OptimizerArg = FusedOptimSpec | Mapping[str, object]
"""A `FusedOptimSpec`, or TorchRec `fused_params` (`{"optimizer": ..., "learning_rate": ...}`)."""


class FusedTable(nn.Module):
    """Holds one table's `weight` Parameter (a view of its group's packed weight)."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)


class BatchedFusedEmbeddingBag(nn.Module):
    """Pooled lookup over tables sharing (dim, pooling); backward updates rows in place.

    Args:
        tables: `FusedTableSpec`s (or `EmbeddingBagConfig`s, converted) with equal `dim` and
            `pooling`; names unique. Row offsets follow this order.
        optimizer: the optimizer applied in backward (`FusedOptimSpec` or `fused_params`).
        device: where weights and state live.

    `forward(ids, offsets, per_sample_weights)` returns `(num_bags, D)`. After `backward`, the
    rows the ids touched are updated and no `.grad` is produced; `fused_optimizer` exposes the
    state (`<table>.momentum1`, ...) and the learning rate.
    """

    _step: Tensor

    def __init__(
        self,
        tables: Sequence[FusedTableSpec | EmbeddingBagConfig],
        optimizer: OptimizerArg,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        specs = [
            t if isinstance(t, FusedTableSpec) else FusedTableSpec.from_config(t) for t in tables
        ]
        if not specs:
            raise ValueError("BatchedFusedEmbeddingBag needs at least one table")
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"table names must be unique, got {names}")
        first = specs[0]
        for t in specs:
            if (t.dim, t.pooling) != (first.dim, first.pooling):
                raise ValueError(
                    f"tables of one batched lookup share dim and pooling: {t.name!r} has "
                    f"(dim={t.dim}, {t.pooling.value}), {first.name!r} has "
                    f"(dim={first.dim}, {first.pooling.value})"
                )
        self.spec = (
            optimizer
            if isinstance(optimizer, FusedOptimSpec)
            else (FusedOptimSpec.from_fused_params(optimizer))
        )
        self.dim = first.dim
        self.pooling: PoolingType = first.pooling
        self.table_specs = specs
        rows = [t.num_rows for t in specs]
        self.row_offsets: list[int] = [sum(rows[:i]) for i in range(len(rows))]
        """First packed row of each table (add it to table-local ids)."""
        self.num_rows = sum(rows)
        views = allocate_packed(rows, self.dim, dtype=torch.float32, device=device)
        self.tables = nn.ModuleDict(
            {t.name: FusedTable(v) for t, v in zip(specs, views, strict=True)}
        )
        for t in specs:
            t.init_(self._table_weight(t.name))
        state = init_state(self.spec.optimizer, self.num_rows, self.dim, device=device)
        self._state_names = list(state)
        for name, tensor in state.items():
            huge_pages(tensor)  # updated at the rows of the weight's (memory.py)
            self.register_buffer(f"_{name}", tensor, persistent=False)
        self.register_buffer(
            "_step", torch.zeros(1, dtype=torch.int64, device=device), persistent=False
        )
        # (`_step`, its version, its value) as of our last update (see `_next_step`).
        self._host_step: tuple[int, int, int] | None = None
        self._optimizer = FusedEmbeddingOptimizer(
            self.spec,
            {t.name: self._table_weight(t.name) for t in specs},
            self._state_views,
            lambda: self._step,
        )
        for t in specs:
            # Read by `in_backward_optimizer_filter`: a dense optimizer must leave these alone.
            self._table_weight(t.name)._in_backward_optimizers = [self._optimizer]  # type: ignore[attr-defined]  # marker attribute, as torch's apply_optimizer_in_backward sets

    def _table_weight(self, name: str) -> Tensor:
        weight = self.tables[name].weight
        assert isinstance(weight, Tensor)
        return weight

    def split_embedding_weights(self) -> list[Tensor]:
        """Each table's `(num_rows, dim)` weight, in table order."""
        return [self._table_weight(t.name) for t in self.table_specs]

    def packed_weight(self) -> Tensor:
        """The `(total_rows, D)` packed weight (a view; re-packed if something split it)."""
        weights = self.split_embedding_weights()
        full = packed_weight(weights)
        if full is None:
            repack_(weights)
            full = packed_weight(weights)
            assert full is not None
        return full

    def optimizer_state(self) -> dict[str, Tensor]:
        """State tensors over all packed rows: `"momentum1"` / `"momentum2"`."""
        return {name: getattr(self, f"_{name}") for name in self._state_names}

    def _state_views(self) -> dict[str, dict[str, Tensor]]:
        full = self.optimizer_state()
        out: dict[str, dict[str, Tensor]] = {}
        for t, start in zip(self.table_specs, self.row_offsets, strict=True):
            out[t.name] = {k: v[start : start + t.num_rows] for k, v in full.items()}
        return out

    @property
    def fused_optimizer(self) -> FusedEmbeddingOptimizer:
        """The KeyedOptimizer view: state_dict, load_state_dict, `param_groups[0]["lr"]`."""
        return self._optimizer

    def _next_step(self) -> int:
        """Advance the step counter; its new value, read from the device only when the counter
        was changed elsewhere (loaded, moved) since the last backward: no host sync per step."""
        step = self._step
        known = self._host_step
        if known is None or known[0] != id(step) or known[1] != step._version:
            value = int(step.item())
        else:
            value = known[2]
        step.add_(1)
        self._host_step = (id(step), step._version, value + 1)
        return value + 1

    def _update_context(self) -> tuple[Tensor, Mapping[str, Tensor], FusedOptimSpec, float, int]:
        step = self._next_step()
        lr = self._optimizer.learning_rate
        return self.packed_weight(), self.optimizer_state(), self.spec, lr, step

    def forward(
        self, ids: Tensor, offsets: Tensor, per_sample_weights: Tensor | None = None
    ) -> Tensor:
        """Pooled lookup.

        ids: `(N,)` group rows (`table-local id + row_offsets[table]`), any integer dtype.
        offsets: `(num_bags + 1,)`; bag `b` is `ids[offsets[b]:offsets[b + 1]]`.
        per_sample_weights: `(N,)` per-id weights (SUM pooling only).
        Returns `(num_bags, D)` float32; empty bags give zeros.
        """
        if per_sample_weights is not None and self.pooling is not PoolingType.SUM:
            raise ValueError(f"per_sample_weights need SUM pooling, got {self.pooling.value}")
        ids = ids.long()
        offsets = offsets.long()
        weights = self.split_embedding_weights()
        self.packed_weight()  # re-pack if needed, so the lookup is one kernel call
        if not torch.is_grad_enabled() or not any(w.requires_grad for w in weights):
            return batched_embedding_bag(
                weights, ids, offsets, pooling=self.pooling, per_sample_weights=per_sample_weights
            )
        update: Callable[[], tuple[Tensor, Mapping[str, Tensor], FusedOptimSpec, float, int]] = (
            self._update_context
        )
        out: Tensor = FusedLookupFunction.apply(  # type: ignore[no-untyped-call]  # torch leaves apply untyped
            ids, offsets, per_sample_weights, self.pooling, update, *weights
        )
        return out

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        repack_(self.split_embedding_weights())
        self._host_step = None
        return result

    def extra_repr(self) -> str:
        return (
            f"tables={[t.name for t in self.table_specs]}, dim={self.dim}, "
            f"pooling={self.pooling.value}, optimizer={self.spec.optimizer.name}"
        )
