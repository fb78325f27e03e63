"""The jagged value types (TorchRec path `torchrec.sparse.jagged_tensor`)."""

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = ["JaggedTensor", "KeyedJaggedTensor", "KeyedTensor"]
