"""TorchRec path `torchrec.metrics.tower_qps`.

This module is the module `shardrec_metrics.rec.tower_qps` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import tower_qps as _component

sys.modules[__name__] = _component
