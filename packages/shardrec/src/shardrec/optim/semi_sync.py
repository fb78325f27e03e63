"""Semi-synchronous training (TorchRec path `torchrec.optim.semi_sync`)."""

from shardrec_optim import semi_sync as _source
from shardrec_optim.semi_sync import *  # noqa: F403

__all__ = list(_source.__all__)
