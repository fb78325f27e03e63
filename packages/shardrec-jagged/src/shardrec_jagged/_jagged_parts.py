"""What JaggedTensor and KeyedJaggedTensor hold alike: values, optional per-id weights, and
lengths and offsets of which either may be given (the other is derived on first use).

A base class rather than a helper module: these accessors sit on the hot path of every lookup,
and an inherited method costs nothing over a method of the class itself. The TorchScript twins
(`_script_types.py`) have their own (TorchScript classes cannot inherit), one copy for both
jagged twins.
"""

from __future__ import annotations

import torch

from shardrec_jagged import _kernels

__all__ = ["JaggedParts"]


class JaggedParts:
    """Accessors of `_values`, `_weights`, `_lengths` and `_offsets`, which the subclass sets.

    Shapes, with `bags` = B for a JaggedTensor and F * B for a KeyedJaggedTensor: values
    `(N, ...)`, weights `(N,)`, lengths `(bags,)`, offsets `(bags + 1,)`.
    """

    _values: torch.Tensor
    _weights: torch.Tensor | None
    _lengths: torch.Tensor | None
    _offsets: torch.Tensor | None

    def values(self) -> torch.Tensor:
        return self._values

    def weights(self) -> torch.Tensor:
        """``(N,)``; raises ``ValueError`` when there are no weights."""
        if self._weights is None:
            raise ValueError(f"this {type(self).__name__} has no weights; use weights_or_none()")
        return self._weights

    def weights_or_none(self) -> torch.Tensor | None:
        return self._weights

    def lengths(self) -> torch.Tensor:
        """Ids per bag, derived from offsets on first use."""
        if self._lengths is None:
            assert self._offsets is not None
            self._lengths = _kernels.offsets_to_lengths(self._offsets)
        return self._lengths

    def lengths_or_none(self) -> torch.Tensor | None:
        return self._lengths

    def offsets(self) -> torch.Tensor:
        """Cumulative lengths from 0, derived from lengths on first use."""
        if self._offsets is None:
            assert self._lengths is not None
            self._offsets = _kernels.lengths_to_offsets(self._lengths)
        return self._offsets

    def offsets_or_none(self) -> torch.Tensor | None:
        return self._offsets

    def device(self) -> torch.device:
        return self._values.device
