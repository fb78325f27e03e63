"""Communication modules (TorchRec path `torchrec.distributed.dist_data`)."""

from shardrec_collectives import dist_data as _fixed_batch
from shardrec_collectives import dist_data_vb as _variable_batch
from shardrec_collectives.dist_data import *  # noqa: F403
from shardrec_collectives.dist_data_vb import *  # noqa: F403

__all__ = [*_fixed_batch.__all__, *_variable_batch.__all__]
