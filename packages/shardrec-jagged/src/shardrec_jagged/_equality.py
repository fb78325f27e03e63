"""Value equality of the jagged types (TorchRec's ``jt_is_equal`` / ``kjt_is_equal``).

Two values are equal when they describe the same bags: same keys in the same order, same
per-key batch sizes, equal values, lengths and weights (a weighted value never equals an
unweighted one). How each was built (lengths or offsets, synced or not) does not matter.
"""

from __future__ import annotations

import torch

from shardrec_jagged.jagged_tensor import JaggedTensor
from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["jt_is_equal", "kjt_is_equal"]


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.equal(a, b))


def jt_is_equal(jt_1: object, jt_2: object) -> bool:
    """True when both JaggedTensors hold the same bags (values, lengths, weights); False when
    either is not a JaggedTensor."""
    if not isinstance(jt_1, JaggedTensor) or not isinstance(jt_2, JaggedTensor):
        return False
    return (
        _same(jt_1.lengths(), jt_2.lengths())
        and _same(jt_1.values(), jt_2.values())
        and _same(jt_1.weights_or_none(), jt_2.weights_or_none())
    )


def kjt_is_equal(kjt_1: object, kjt_2: object) -> bool:
    """True when both KJTs have the same keys, per-key batch sizes and bags; False when either is
    not a KeyedJaggedTensor."""
    if not isinstance(kjt_1, KeyedJaggedTensor) or not isinstance(kjt_2, KeyedJaggedTensor):
        return False
    return (
        kjt_1.keys() == kjt_2.keys()
        and kjt_1.stride() == kjt_2.stride()
        and kjt_1.stride_per_key() == kjt_2.stride_per_key()
        and _same(kjt_1.lengths(), kjt_2.lengths())
        and _same(kjt_1.values(), kjt_2.values())
        and _same(kjt_1.weights_or_none(), kjt_2.weights_or_none())
    )
