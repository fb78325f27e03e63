"""TorchRec path `torchrec.metrics.auc`.

This module is the module `shardrec_metrics.rec.auc` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import auc as _component

sys.modules[__name__] = _component
