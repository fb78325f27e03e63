"""Repository-wide pytest setup: a deterministic Hypothesis profile for the nox sessions.

Plain `pytest` draws new Hypothesis examples on every run (good for finding bugs while
developing). The nox sessions, and so CI, set `SHARDREC_HYPOTHESIS_PROFILE=ci`: each property
test then draws the same examples every run (seeded from the test's name), so a submission's
test result does not depend on luck. A failure found either way is kept as an `@example`.
"""

from __future__ import annotations

import os

try:
    from hypothesis import settings
except ImportError:  # a session without hypothesis (tools' own tests)
    settings = None

if settings is not None:
    settings.register_profile("ci", derandomize=True, print_blob=True)
    profile = os.environ.get("SHARDREC_HYPOTHESIS_PROFILE")
    if profile:
        settings.load_profile(profile)
