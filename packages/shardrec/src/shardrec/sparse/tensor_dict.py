"""tensordict inputs (TorchRec path `torchrec.sparse.tensor_dict`); tensordict stays optional."""

from shardrec_jagged.tensor_dict import maybe_td_to_kjt

__all__ = ["maybe_td_to_kjt"]
