"""The jagged value types (TorchRec path `torchrec.sparse.jagged_tensor`)."""

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor, jt_is_equal, kjt_is_equal

__all__ = ["JaggedTensor", "KeyedJaggedTensor", "KeyedTensor", "jt_is_equal", "kjt_is_equal"]
