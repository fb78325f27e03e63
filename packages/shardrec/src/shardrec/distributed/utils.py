"""Distributed helpers (TorchRec path `torchrec.distributed.utils`): `none_throws`."""

from shardrec_planner.optional import none_throws

__all__ = ["none_throws"]
