"""What the sharded quantized collections share: the plan they were sharded by."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from shardrec_jagged import TorchScriptable
from shardrec_planner import ParameterSharding

__all__ = ["PlannedQuantModule"]


class PlannedQuantModule(TorchScriptable, nn.Module):
    """Base of `ShardedQuantEmbeddingCollection` and `ShardedQuantEmbeddingBagCollection`:
    `plan` (table name -> ParameterSharding, Python-only) and a repr of where each table went."""

    __jit_unused_properties__ = ["plan"]  # noqa: RUF012  # read by torch.jit.script
    # Python-only state the scripted forward never reads; subclasses add their own.
    __jit_ignored_attributes__ = ["_plan_entries"]  # noqa: RUF012

    def __init__(self, plan: Mapping[str, ParameterSharding]) -> None:
        super().__init__()
        self._plan_entries = dict(plan)

    @property
    def plan(self) -> dict[str, ParameterSharding]:
        return dict(self._plan_entries)

    def extra_repr(self) -> str:
        return ", ".join(
            f"{name}: {ps.sharding_type.value} on ranks {list(ps.ranks)}"
            for name, ps in self._plan_entries.items()
        )
