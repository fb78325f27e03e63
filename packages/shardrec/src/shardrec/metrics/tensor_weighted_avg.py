"""TorchRec path `torchrec.metrics.tensor_weighted_avg`.

This module is the module `shardrec_metrics.rec.tensor_weighted_avg` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import tensor_weighted_avg as _component

sys.modules[__name__] = _component
