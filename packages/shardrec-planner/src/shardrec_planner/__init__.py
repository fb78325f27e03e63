"""The sharding plan data model and the planner that chooses it."""

__all__: list[str] = []
