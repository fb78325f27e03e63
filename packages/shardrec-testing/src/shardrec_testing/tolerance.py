"""Per-dtype tolerances and an `assert_close` that uses them."""

from __future__ import annotations

import torch

# (rtol, atol): float32 leaves room for sums reassociated across ranks; half types for one rounding
# of the result plus accumulated rounding of short sums.
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1.3e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """`(rtol, atol)` for comparing tensors of `dtype`; `(0, 0)` for integer and bool dtypes."""
    if dtype in _TOLERANCES:
        return _TOLERANCES[dtype]
    if dtype.is_floating_point or dtype.is_complex:
        raise ValueError(f"no tolerance defined for dtype {dtype}")
    return (0.0, 0.0)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    scale: float = 1.0,
    msg: str | None = None,
) -> None:
    """`torch.testing.assert_close` with this module's tolerance for `expected.dtype`.

    `scale` widens both tolerances (e.g. for long reductions); dtypes and devices must match.
    """
    rtol, atol = tolerance(expected.dtype)
    torch.testing.assert_close(
        actual,
        expected,
        rtol=rtol * scale,
        atol=atol * scale,
        msg=None if msg is None else (lambda default: f"{msg}\n{default}"),
    )
