"""Row-wise Adagrad (TorchRec path `torchrec.optim.rowwise_adagrad`)."""

from shardrec_optim import RowWiseAdagrad

__all__ = ["RowWiseAdagrad"]
