"""TorchRec path `torchrec.metrics.throughput`.

This module is the module `shardrec_metrics.rec.throughput` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import throughput as _component

sys.modules[__name__] = _component
