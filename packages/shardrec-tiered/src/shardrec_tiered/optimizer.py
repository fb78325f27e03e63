"""`TieredFusedOptimizer`: the KeyedOptimizer view of a tiered lookup's optimizer.

As `shardrec_optim.FusedEmbeddingOptimizer` for an in-memory fused lookup: the update happens in
backward (`step()` and `zero_grad()` do nothing) and `param_groups[0]["lr"]` is the learning rate
the next backward applies, so a learning-rate schedule, a `WarmupOptimizer` or a hand-set
`param_groups[i]["lr"]` of the sharded collection's `fused_optimizer` reaches tiered tables too:

```
params:       "<table>.weight" -> a stand-in tensor per table (the rows are in the store)
param_groups: [{"params": [...], "lr": ...}]
state:        {} -- the rows' optimizer state lives in the store with the rows
```

`state_dict()` / `load_state_dict()` refuse, as the tables' own state_dict does: a checkpoint
without the store's optimizer state would be silently incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from torch import Tensor

from shardrec_optim import FusedOptimSpec
from shardrec_optim.fused_optimizer import FusedOptimizer

__all__ = ["TieredFusedOptimizer"]


class TieredFusedOptimizer(FusedOptimizer):
    """Learning-rate view of one tiered lookup's fused optimizer (module docstring).

    Args:
        spec: the optimizer applied in backward (`learning_rate` seeds `param_groups`).
        keys: table name -> a tensor standing for the table (distinct per table).
    """

    def __init__(self, spec: FusedOptimSpec, keys: Mapping[str, Tensor]) -> None:
        params = {f"{name}.weight": t for name, t in keys.items()}
        group: dict[str, Any] = {"params": list(keys.values()), "lr": spec.learning_rate}
        super().__init__(params, {}, [group])
        self.spec = spec
        self._tables = list(keys)

    @property  # type: ignore[override]  # torch declares a plain attribute; this view is empty
    def state(self) -> MutableMapping[Tensor, Any]:
        return {}

    @state.setter
    def state(self, value: MutableMapping[Tensor, Any]) -> None:
        if value:
            raise AttributeError("a tiered table's optimizer state lives in its store")

    @property
    def learning_rate(self) -> float:
        """The learning rate the next backward applies (`param_groups[0]["lr"]`)."""
        lr = float(self.param_groups[0]["lr"])
        if not lr >= 0:
            raise ValueError(f"learning rate must be >= 0, got {lr}")
        return lr

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"learning rate must be >= 0, got {value}")
        self.param_groups[0]["lr"] = value

    def state_dict(self) -> dict[str, object]:
        raise NotImplementedError(
            f"tables {self._tables} are tiered: checkpoints of tiered tables (and their "
            "optimizer state) are not built yet (docs/tiered.md)"
        )

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        self.state_dict()

    def __repr__(self) -> str:
        return (
            f"TieredFusedOptimizer({self.spec.optimizer.name}, lr={self.param_groups[0]['lr']}, "
            f"tables={self._tables})"
        )
