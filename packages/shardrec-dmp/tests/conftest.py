"""The rank-pool fixtures; the tests' helper module (`_raw_model`) importable under
--import-mode=importlib (and so in the rank processes, which inherit `sys.path`)."""

from __future__ import annotations

import pathlib
import sys

from shardrec_testing.fixtures import pool_factory, rank_pool

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

__all__ = ["pool_factory", "rank_pool"]
