"""What a train pipeline can move between devices (TorchRec path `torchrec.streamable`)."""

from shardrec_dmp import Pipelineable

__all__ = ["Pipelineable"]
