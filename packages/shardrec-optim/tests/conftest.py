from shardrec_testing.fixtures import pool_factory, rank_pool

__all__ = ["pool_factory", "rank_pool"]
