"""Test helpers for distributed code (TorchRec path `torchrec.distributed.test_utils`)."""

from shardrec.distributed.test_utils import multi_process

__all__ = ["multi_process"]
