"""TorchRec path `torchrec.datasets.utils`.

This module *is* `shardrec_data.datapipes` (the same module object), not a copy of its names:
TorchRec users patch `torchrec.datasets.utils.get_worker_info` to steer `ParallelReadConcat`,
and a re-export would leave the patch without effect.
"""

import sys

from shardrec_data import datapipes as _datapipes

sys.modules[__name__] = _datapipes
