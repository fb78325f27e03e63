"""Compute kernels (TorchRec path `torchrec.distributed.embedding_types`)."""

from shardrec_planner import EmbeddingComputeKernel

__all__ = ["EmbeddingComputeKernel"]
