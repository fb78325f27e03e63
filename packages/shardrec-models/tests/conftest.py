"""Rank-pool fixtures for the distributed tests; `models_reference` is made importable by the
test modules themselves (the rank pool loads them by path, without this file)."""

from shardrec_testing.fixtures import pool_factory, rank_pool

__all__ = ["pool_factory", "rank_pool"]
