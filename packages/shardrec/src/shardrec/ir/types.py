"""Export IR serializer interface (TorchRec path `torchrec.ir.types`)."""

from shardrec_embedding.ir.types import SerializerInterface

__all__ = ["SerializerInterface"]
