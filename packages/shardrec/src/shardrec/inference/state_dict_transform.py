"""Sharded state_dict to a device, and gathered for serving (TorchRec path
`torchrec.inference.state_dict_transform`)."""

from shardrec_dmp.state_dict_transform import state_dict_gather, state_dict_to_device

__all__ = ["state_dict_gather", "state_dict_to_device"]
