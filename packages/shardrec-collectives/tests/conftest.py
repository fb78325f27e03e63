import pathlib
import sys

from shardrec_testing.fixtures import pool_factory, rank_pool

# the tests' helper module (`_qcomm_cases`) importable under --import-mode=importlib
_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

__all__ = ["pool_factory", "rank_pool"]
