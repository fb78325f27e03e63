"""Module helpers (TorchRec path `torchrec.modules.utils`)."""

from shardrec_embedding import module_utils as _source
from shardrec_embedding.module_utils import *  # noqa: F403

__all__ = list(_source.__all__)
