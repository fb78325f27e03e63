"""Embedding modules (TorchRec path `torchrec.modules`)."""

__all__ = []
