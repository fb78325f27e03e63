"""KeyedJaggedTensor as a pytree node: tensors are leaves; keys and batch layout are context.

Imported at the end of ``keyed_jagged_tensor.py``, so the registration happens with the class.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import torch
from torch.utils._pytree import GetAttrKey, KeyEntry, register_pytree_node

from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

_KJTContext = tuple[
    tuple[str, ...], int, tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None
]


def _kjt_flatten(kjt: KeyedJaggedTensor) -> tuple[list[torch.Tensor | None], _KJTContext]:
    inv = kjt._inverse_indices
    spkpr = kjt._stride_per_key_per_rank
    ctx: _KJTContext = (
        tuple(kjt._keys),
        kjt._stride,
        None if spkpr is None else tuple(tuple(r) for r in spkpr),
        None if inv is None else tuple(inv[0]),
    )
    leaves = [
        kjt._values,
        kjt._weights,
        kjt._lengths,
        kjt._offsets,
        None if inv is None else inv[1],
    ]
    return leaves, ctx


def _kjt_flatten_with_keys(
    kjt: KeyedJaggedTensor,
) -> tuple[list[tuple[KeyEntry, torch.Tensor | None]], _KJTContext]:
    leaves, ctx = _kjt_flatten(kjt)
    named: list[tuple[KeyEntry, torch.Tensor | None]] = [
        (GetAttrKey(k), v) for k, v in zip(KeyedJaggedTensor._fields, leaves, strict=True)
    ]
    return named, ctx


def _kjt_unflatten(leaves: Iterable[torch.Tensor | None], ctx: _KJTContext) -> KeyedJaggedTensor:
    values, weights, lengths, offsets, inv = leaves
    assert values is not None
    keys, stride, spkpr, inv_keys = ctx
    return KeyedJaggedTensor._unchecked(
        keys=list(keys),
        values=values,
        weights=weights,
        lengths=lengths,
        offsets=offsets,
        stride=stride,
        stride_per_key_per_rank=None if spkpr is None else [list(r) for r in spkpr],
        inverse_indices=None if inv is None or inv_keys is None else (list(inv_keys), inv),
    )


def _kjt_context_to_json(ctx: _KJTContext) -> str:
    # torch.export.save writes the input spec's context as text: a program taking a KJT
    # reloads only if its context round-trips.
    keys, stride, spkpr, inv = ctx
    return json.dumps(
        [
            list(keys),
            stride,
            None if spkpr is None else [list(r) for r in spkpr],
            None if inv is None else list(inv),
        ]
    )


def _kjt_context_from_json(text: str) -> _KJTContext:
    keys, stride, spkpr, inv = json.loads(text)
    return (
        tuple(keys),
        stride,
        None if spkpr is None else tuple(tuple(r) for r in spkpr),
        None if inv is None else tuple(inv),
    )


register_pytree_node(
    KeyedJaggedTensor,
    _kjt_flatten,
    _kjt_unflatten,
    flatten_with_keys_fn=_kjt_flatten_with_keys,
    serialized_type_name="shardrec_jagged.KeyedJaggedTensor",
    to_dumpable_context=_kjt_context_to_json,
    from_dumpable_context=_kjt_context_from_json,
)
# A saved exported program pickles its example inputs; torch.load (weights_only by default)
# rebuilds a KJT only if the class is allowlisted. A KJT holds tensors, strings and ints only.
torch.serialization.add_safe_globals([KeyedJaggedTensor])
