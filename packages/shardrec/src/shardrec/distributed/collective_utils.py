"""TorchRec path `torchrec.distributed.collective_utils`.

This module is the module `shardrec_collectives.collective_utils` itself.

The same module object, not a re-export, so that setting its switches
(`collective_utils._INITIALIZED = False`, as TorchRec's tests do) reaches the code that reads them.
"""

import sys

from shardrec_collectives import collective_utils as _component

sys.modules[__name__] = _component
