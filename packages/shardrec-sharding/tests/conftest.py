"""Shared rank pools, and the tests' helper module (`_sharding_placements`) importable under
--import-mode=importlib."""

import pathlib
import sys

from shardrec_testing.fixtures import pool_factory, rank_pool

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

__all__ = ["pool_factory", "rank_pool"]
