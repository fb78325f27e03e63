"""TorchRec path `torchrec.metrics.segmented_ne`.

This module is the module `shardrec_metrics.rec.segmented_ne` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import segmented_ne as _component

sys.modules[__name__] = _component
