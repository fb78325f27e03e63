"""DLRM and its arches (TorchRec path `torchrec.models.dlrm`)."""

from shardrec_models import DLRMTrain
from shardrec_models import arches as _arches
from shardrec_models import dlrm as _models
from shardrec_models.arches import *  # noqa: F403
from shardrec_models.dlrm import *  # noqa: F403

__all__ = [*_arches.__all__, *_models.__all__, "DLRMTrain"]
