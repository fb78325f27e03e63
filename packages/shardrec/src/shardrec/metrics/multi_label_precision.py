"""TorchRec path `torchrec.metrics.multi_label_precision`.

This module is the module `shardrec_metrics.rec.multi_label_precision` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import multi_label_precision as _component

sys.modules[__name__] = _component
