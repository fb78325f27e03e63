"""Integration tests share the per-world-size gloo rank pools of shardrec_testing."""

from shardrec_testing.fixtures import pool_factory, rank_pool

__all__ = ["pool_factory", "rank_pool"]
