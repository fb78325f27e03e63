"""TorchRec path `torchrec.metrics.hindsight_target_pr`.

This module is the module `shardrec_metrics.rec.hindsight_target_pr` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import hindsight_target_pr as _component

sys.modules[__name__] = _component
