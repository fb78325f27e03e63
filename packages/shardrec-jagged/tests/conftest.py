"""Shared test setup: make ``jagged_reference.py`` importable from the test modules."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
