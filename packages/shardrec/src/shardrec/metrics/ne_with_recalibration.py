"""TorchRec path `torchrec.metrics.ne_with_recalibration`.

This module is the module `shardrec_metrics.rec.ne_with_recalibration` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import ne_with_recalibration as _component

sys.modules[__name__] = _component
