"""Optional fbgemm backend: imported lazily, on first use, with one debug log line when it fails.

fbgemm-gpu wheels are built for one torch version each (fbgemm-gpu-cpu 1.8.0 pairs with torch
2.13.0); a mismatched install raises at import or while loading its operator library. Any failure
means "no fbgemm": every kernel uses its torch-native implementation, and one DEBUG record on
this module's logger says why (an optional backend is no reason for a warning in every venv
without it; `shardrec version` shows which backend loaded).
"""

from __future__ import annotations

import functools
import logging

_log = logging.getLogger(__name__)


class FbgemmUnavailableWarning(UserWarning):
    """fbgemm_gpu could not be imported. No longer emitted (a DEBUG log record says it now);
    kept so that warning filters naming it keep working."""


@functools.cache
def fbgemm_available() -> bool:
    """True when ``torch.ops.fbgemm`` holds the jagged operators (imports fbgemm_gpu once)."""
    try:
        import fbgemm_gpu  # noqa: F401  (import registers torch.ops.fbgemm)
        import torch

        torch.ops.fbgemm.asynchronous_complete_cumsum  # noqa: B018  (raises if not registered)
    except Exception as exc:  # any failure to load means: use the torch path
        _log.debug(
            "fbgemm_gpu is unavailable (%s: %s); shardrec_jagged uses its torch-native kernels. "
            "Install fbgemm-gpu-cpu==1.8.0 (pairs with torch 2.13.0) for the fbgemm backend.",
            type(exc).__name__,
            exc,
        )
        return False
    return True
