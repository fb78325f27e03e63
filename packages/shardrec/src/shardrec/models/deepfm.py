"""DeepFM model and its arches (TorchRec path `torchrec.models.deepfm`)."""

from shardrec_models import deepfm_nn as _source
from shardrec_models.deepfm_nn import *  # noqa: F403

__all__ = list(_source.__all__)
