"""Optional fbgemm backend: imported lazily, on first use, with one warning when it fails.

fbgemm-gpu wheels are built for one torch version each (fbgemm-gpu-cpu 1.8.0 pairs with torch
2.13.0); a mismatched install raises at import or while loading its operator library. Any failure
means "no fbgemm": we warn once and every kernel uses its torch-native implementation.
"""

from __future__ import annotations

import functools
import warnings


class FbgemmUnavailableWarning(UserWarning):
    """fbgemm_gpu could not be imported; the torch-native kernels are used instead."""


@functools.cache
def fbgemm_available() -> bool:
    """True when ``torch.ops.fbgemm`` holds the jagged operators (imports fbgemm_gpu once)."""
    try:
        import fbgemm_gpu  # noqa: F401  (import registers torch.ops.fbgemm)
        import torch

        torch.ops.fbgemm.asynchronous_complete_cumsum  # noqa: B018  (raises if not registered)
    except Exception as exc:  # any failure to load means: use the torch path
        warnings.warn(
            f"fbgemm_gpu is unavailable ({type(exc).__name__}: {exc}); shardrec_jagged uses its "
            "torch-native kernels. Install fbgemm-gpu-cpu==1.8.0 (pairs with torch 2.13.0) for "
            "the fbgemm backend.",
            FbgemmUnavailableWarning,
            stacklevel=3,
        )
        return False
    return True
