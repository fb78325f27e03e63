"""HashZch metrics (TorchRec path `torchrec.modules.hash_mc_metrics`)."""

from shardrec_embedding.mc import ScalarLogger

__all__ = ["ScalarLogger"]
