"""Jagged value types (TorchRec path `torchrec.sparse`)."""

__all__ = []
