"""TorchRec path `torchrec.metrics.rec_metric`.

This module is the module `shardrec_metrics.rec.rec_metric` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import rec_metric as _component

sys.modules[__name__] = _component
