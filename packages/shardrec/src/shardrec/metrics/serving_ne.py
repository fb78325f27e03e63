"""TorchRec path `torchrec.metrics.serving_ne`.

This module is the module `shardrec_metrics.rec.serving_ne` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import serving_ne as _component

sys.modules[__name__] = _component
