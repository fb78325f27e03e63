"""TorchRec path `torchrec.metrics.recall_session`.

This module is the module `shardrec_metrics.rec.recall_session` itself.

The same module object, not a re-export, so patches of its names (`time.monotonic` in the
throughput tests, helper functions) reach the code that uses them.
"""

import sys

from shardrec_metrics.rec import recall_session as _component

sys.modules[__name__] = _component
