"""Test helpers (TorchRec path `torchrec.test_utils`): a free port, sanitizer skips."""

from shardrec_testing import get_free_port, skip_if_asan, skip_if_asan_class

__all__ = ["get_free_port", "skip_if_asan", "skip_if_asan_class"]
