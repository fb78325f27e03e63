"""Shared enums and mixins (TorchRec path `torchrec.types`)."""

from shardrec_embedding import CacheMixin, DataType

__all__ = ["CacheMixin", "DataType"]
