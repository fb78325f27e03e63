"""TorchRec path `torchrec.metrics.sum_weights`.

This module is the module `shardrec_metrics.rec.sum_weights` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import sum_weights as _component

sys.modules[__name__] = _component
