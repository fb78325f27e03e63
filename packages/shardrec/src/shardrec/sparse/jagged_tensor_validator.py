"""TorchRec path `torchrec.sparse.jagged_tensor_validator`."""

from shardrec_jagged import validate_keyed_jagged_tensor

__all__ = ["validate_keyed_jagged_tensor"]
