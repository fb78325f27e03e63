"""TorchRec path `torchrec.metrics.precision_session`.

This module is the module `shardrec_metrics.rec.precision_session` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import precision_session as _component

sys.modules[__name__] = _component
