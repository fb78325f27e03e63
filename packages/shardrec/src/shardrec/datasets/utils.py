"""The batch type (TorchRec path `torchrec.datasets.utils`)."""

from shardrec_data import Batch

__all__ = ["Batch"]
