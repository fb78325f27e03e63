"""`FusedEmbeddingOptimizer`: the KeyedOptimizer view of a fused lookup's optimizer.

The update already happened inside backward, so `step()` and `zero_grad()` do nothing; the
object exists for checkpoints and learning-rate control:

```
params:       "<table>.weight"  -> the table's weight Parameter
state:        weight -> {"<table>.momentum1": (rows, D) or (rows,), "<table>.momentum2": ...,
                         "<table>.step": (1,) int64 for the optimizers with bias correction}
param_groups: [{"params": [...], "lr": ...}]  -- the lr backward reads, so schedules apply
```
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from shardrec_optim.keyed import KeyedOptimizer
from shardrec_optim.rules import RULES
from shardrec_optim.spec import FusedOptimSpec

__all__ = [
    "EmptyFusedOptimizer",
    "FusedEmbeddingOptimizer",
    "FusedOptimizer",
    "FusedOptimizerModule",
]


class FusedOptimizer(KeyedOptimizer):
    """A KeyedOptimizer whose parameters are updated during backward (TorchRec's
    `torchrec.optim.fused.FusedOptimizer`): `step()` only runs `closure`, `zero_grad()` does
    nothing. It holds the state and `param_groups` for checkpoints and learning-rate control."""

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        """No-op: rows were updated during backward. Runs `closure` if given."""
        return None if closure is None else closure()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """No-op: fused parameters never hold a `.grad`."""


class EmptyFusedOptimizer(FusedOptimizer):
    """A fused optimizer over no parameters (TorchRec's; e.g. a module with no fused tables)."""

    def __init__(self) -> None:
        super().__init__({}, {}, [])


@runtime_checkable
class FusedOptimizerModule(Protocol):
    """A module that trains some of its parameters in backward and exposes their optimizer
    (TorchRec's `FusedOptimizerModule`): `FusedEmbeddingBagCollection`, the sharded
    collections, `DistributedModelParallel`."""

    @property
    def fused_optimizer(self) -> KeyedOptimizer: ...


class FusedEmbeddingOptimizer(FusedOptimizer):
    """Keyed view of the optimizer state of one fused lookup (see module docstring).

    Args:
        spec: the optimizer applied in backward (`learning_rate` seeds `param_groups`).
        weights: table name -> weight Parameter.
        state_of: returns table name -> {state name -> tensor view of that table's rows};
            called on every access, so state moved by `.to()` is still seen.
        step: the shared `(1,)` int64 step counter.
    """

    def __init__(
        self,
        spec: FusedOptimSpec,
        weights: Mapping[str, Tensor],
        state_of: Callable[[], Mapping[str, Mapping[str, Tensor]]],
        step: Callable[[], Tensor],
    ) -> None:
        params = {f"{name}.weight": w for name, w in weights.items()}
        group: dict[str, Any] = {"params": list(weights.values()), "lr": spec.learning_rate}
        super().__init__(params, {}, [group])
        self.spec = spec
        self._weights = dict(weights)
        self._state_of = state_of
        self._step = step

    @property  # type: ignore[override]  # torch declares a plain attribute; ours is a live view
    def state(self) -> MutableMapping[Tensor, Any]:
        per_table = self._state_of()
        out: dict[Tensor, Any] = {}
        for name, w in self._weights.items():
            entry = {f"{name}.{k}": v for k, v in per_table[name].items()}
            if RULES[self.spec.optimizer].uses_step:
                entry[f"{name}.step"] = self._step()
            out[w] = entry
        return out

    @state.setter
    def state(self, value: MutableMapping[Tensor, Any]) -> None:
        if value:
            raise AttributeError("fused optimizer state is owned by its lookup; load_state_dict")

    @property
    def learning_rate(self) -> float:
        """The learning rate the next backward applies (`param_groups[0]["lr"]`)."""
        raw = self.param_groups[0]["lr"]
        try:
            lr = float(raw)
        except (TypeError, ValueError):
            raise TypeError(
                f'param_groups[0]["lr"] must be a number, got {raw!r}; set a float'
            ) from None
        if not math.isfinite(lr):
            raise ValueError(
                f'learning rate must be finite, got {lr} (param_groups[0]["lr"], set by you or '
                "an LR scheduler)"
            )
        if lr < 0:
            raise ValueError(f"learning rate must be >= 0, got {lr}")
        return lr

    def __repr__(self) -> str:
        return (
            f"FusedEmbeddingOptimizer({self.spec.optimizer.name}, lr={self.param_groups[0]['lr']}, "
            f"tables={list(self._weights)})"
        )
