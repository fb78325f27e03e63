"""The sharders `collective_plan` uses when given none (TorchRec: `get_default_sharders()`).

The sharders live in a higher layer (shardrec-sharding), so the planner cannot import them: the
layer that can (shardrec-dmp, imported by `import shardrec`) registers their factory here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shardrec_planner.sharder import PlannerSharder

__all__ = ["default_sharders", "set_default_sharders"]

_factory: Callable[[], Sequence[PlannerSharder]] | None = None


def set_default_sharders(factory: Callable[[], Sequence[PlannerSharder]]) -> None:
    """Register the function that makes the default sharders (a new list per call)."""
    global _factory
    _factory = factory


def default_sharders() -> list[PlannerSharder]:
    """The registered default sharders; `ValueError` naming the fix when none are registered."""
    if _factory is None:
        raise ValueError(
            "no default sharders are registered: pass sharders=... (e.g. "
            "shardrec_sharding.get_default_sharders()), or import shardrec (or shardrec_dmp), "
            "which registers them"
        )
    return list(_factory())
