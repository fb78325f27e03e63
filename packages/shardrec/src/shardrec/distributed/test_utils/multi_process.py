"""TorchRec-style multi-process tests (TorchRec path
`torchrec.distributed.test_utils.multi_process`)."""

from shardrec_testing import MultiProcessContext, MultiProcessTestBase

__all__ = ["MultiProcessContext", "MultiProcessTestBase"]
