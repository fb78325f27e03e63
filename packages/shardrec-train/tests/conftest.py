"""Make the tests' helper module (`_train_helpers`) importable under --import-mode=importlib."""

from __future__ import annotations

import pathlib
import sys

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
