"""Random batches (TorchRec path `torchrec.datasets.random`)."""

from shardrec_data.random_rec import RandomRecDataset

__all__ = ["RandomRecDataset"]
