"""Test helpers (TorchRec path `torchrec.test_utils`): a free port, sanitizer skips, seeding."""

from shardrec_testing import get_free_port, seed_and_log, skip_if_asan, skip_if_asan_class

__all__ = ["get_free_port", "seed_and_log", "skip_if_asan", "skip_if_asan_class"]
