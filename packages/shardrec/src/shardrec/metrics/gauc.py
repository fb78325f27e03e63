"""TorchRec path `torchrec.metrics.gauc`.

This module is the module `shardrec_metrics.rec.gauc` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import gauc as _component

sys.modules[__name__] = _component
