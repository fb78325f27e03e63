"""Whether the Triton kernels can run: Triton is an optional dependency, imported lazily.

Triton ships with CUDA builds of torch; CPU machines usually lack it. Without it every lookup
takes the torch-native path, after one `TritonUnavailableWarning` (as the fbgemm fallback
warns once). Under `TRITON_INTERPRET=1` (set before the first import of the kernels) the
kernels run on CPU tensors through Triton's interpreter: slow, but exact, which is how the
tests check them on machines without a GPU.
"""

from __future__ import annotations

import functools
import os
import warnings

__all__ = ["TritonUnavailableWarning", "interpreting", "triton_available"]


class TritonUnavailableWarning(UserWarning):
    """Triton could not be imported; lookups on CUDA use their torch-native kernels."""


@functools.cache
def triton_available() -> bool:
    """True when `triton` and our kernels import (checked once; warns once when not)."""
    try:
        from shardrec_embedding.triton import kernels  # noqa: F401  (imports triton)
    except Exception as exc:  # any failure to load means: use the torch path
        warnings.warn(
            f"Triton is unavailable ({type(exc).__name__}: {exc}); embedding lookups on CUDA "
            "use their torch-native kernels. Install triton (it ships with CUDA builds of "
            "torch) for the Triton pooled lookup and fused rowwise-Adagrad backward.",
            TritonUnavailableWarning,
            stacklevel=3,
        )
        return False
    return True


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
