"""The planner's own error type."""

from __future__ import annotations


class PlannerError(Exception):
    """No plan satisfies the model, the topology and the constraints.

    The message names the tables that cannot be placed, the memory they need against what the ranks
    have, and what to change (more ranks, a smaller dim, another sharding type).
    """
