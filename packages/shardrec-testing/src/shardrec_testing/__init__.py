"""Test helpers for shardrec: spawned rank pools, free ports, reference models, tolerances."""

__all__: list[str] = []
