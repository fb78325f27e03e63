"""Inference helpers (TorchRec path `torchrec.inference`)."""

from shardrec.inference import modules, state_dict_transform

__all__ = ["modules", "state_dict_transform"]
