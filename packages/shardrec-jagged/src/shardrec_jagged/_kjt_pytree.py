"""KeyedJaggedTensor as a pytree node: tensors are leaves; keys and batch layout are context.

``register_kjt_pytree(cls)`` is called once, by ``keyed_jagged_tensor.py`` right after the class
is defined (registering is part of defining the type, as for JaggedTensor and KeyedTensor). The
class is an argument, so this module never imports it at runtime
(docs/design/jagged-module-split.md).

Leaves, in TorchRec's order: values, weights, lengths, offsets, inverse-indices tensor. Unflatten
accepts fewer leaves (the missing ones are None, as TorchRec) and rejects more.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch.utils._pytree import GetAttrKey, KeyEntry, register_pytree_node

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["register_kjt_pytree"]

_KJTContext = tuple[
    tuple[str, ...], int | None, tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None
]
_LEAF_NAMES = ("_values", "_weights", "_lengths", "_offsets", "_inverse_indices")


def _kjt_flatten(kjt: KeyedJaggedTensor) -> tuple[list[torch.Tensor | None], _KJTContext]:
    inv = kjt._inverse_indices
    spkpr = kjt._stride_per_key_per_rank
    # The batch is left out of the context when the leaves give it (see unflatten): a program
    # exported with a dynamic batch then accepts any batch size.
    derived = (
        spkpr is None and bool(kjt._keys) and (kjt._lengths is not None or kjt._offsets is not None)
    )
    ctx: _KJTContext = (
        tuple(kjt._keys),
        None if derived else kjt._stride,
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
        (GetAttrKey(k), v) for k, v in zip(_LEAF_NAMES, leaves, strict=True)
    ]
    return named, ctx


def _context_to_json(ctx: _KJTContext) -> str:
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


def _context_from_json(text: str) -> _KJTContext:
    keys, stride, spkpr, inv = json.loads(text)
    return (
        tuple(keys),
        stride,
        None if spkpr is None else tuple(tuple(r) for r in spkpr),
        None if inv is None else tuple(inv),
    )


def register_kjt_pytree(cls: type[KeyedJaggedTensor]) -> None:
    """Register ``cls`` with torch's pytree (and torch.load's allowlist). Call once."""

    def unflatten(leaves: Iterable[torch.Tensor | None], ctx: _KJTContext) -> KeyedJaggedTensor:
        items = list(leaves)
        if len(items) > len(_LEAF_NAMES):
            raise ValueError(
                f"a KeyedJaggedTensor pytree has at most {len(_LEAF_NAMES)} leaves "
                f"{list(_LEAF_NAMES)}, got {len(items)}"
            )
        items += [None] * (len(_LEAF_NAMES) - len(items))
        values, weights, lengths, offsets, inv = items
        assert values is not None
        keys, stride, spkpr, inv_keys = ctx
        strides = None if spkpr is None else [list(r) for r in spkpr]
        # stride None: the KJT derives its batch from the leaves on first use (a symbolic size
        # under torch.export with a dynamic batch; a number here would pin the example's).
        inverse = None if inv is None or inv_keys is None else (list(inv_keys), inv)
        # The leaves come in _unchecked's own argument order.
        return cls._unchecked(
            list(keys), values, weights, lengths, offsets, stride, strides, inverse_indices=inverse
        )

    register_pytree_node(
        cls,
        _kjt_flatten,
        unflatten,
        flatten_with_keys_fn=_kjt_flatten_with_keys,
        serialized_type_name="shardrec_jagged.KeyedJaggedTensor",
        to_dumpable_context=_context_to_json,
        from_dumpable_context=_context_from_json,
    )
    # A saved exported program pickles its example inputs; torch.load (weights_only by default)
    # rebuilds a KJT only if the class is allowlisted. A KJT holds tensors, strings and ints only.
    torch.serialization.add_safe_globals([cls])
