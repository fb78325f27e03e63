"""`maybe_td_to_kjt`: a tensordict `TensorDict` of jagged nested tensors -> KeyedJaggedTensor
(TorchRec's `torchrec.sparse.tensor_dict`).

tensordict is optional and never imported here: a `TensorDict` can only reach this function
if its caller imported tensordict, so the check looks the class up in `sys.modules`.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["maybe_td_to_kjt"]


def _is_tensor_dict(features: object) -> bool:
    module = sys.modules.get("tensordict")
    td_type = getattr(module, "TensorDict", None) if module is not None else None
    return isinstance(td_type, type) and isinstance(features, td_type)


def _jagged_parts(td: Any, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`(values, lengths)` of the TensorDict's entry `key`, a jagged-layout nested tensor."""
    try:
        nt = td[key]
    except KeyError:
        raise KeyError(
            f"maybe_td_to_kjt: key {key!r} is not in the TensorDict, which holds {list(td.keys())}"
        ) from None
    if not isinstance(nt, torch.Tensor) or not nt.is_nested or nt.layout != torch.jagged:
        kind = f"a {nt.layout} tensor" if isinstance(nt, torch.Tensor) else type(nt).__name__
        raise TypeError(
            f"maybe_td_to_kjt: entry {key!r} is {kind}; each entry must be a jagged-layout "
            "nested tensor (torch.nested.nested_tensor_from_jagged(values, lengths=...))"
        )
    # (torch's stubs type a nested tensor as a plain Tensor, without these two methods.)
    lengths: torch.Tensor | None = nt.lengths()  # type: ignore[attr-defined]
    if lengths is None:
        lengths = torch.diff(nt.offsets())  # type: ignore[attr-defined]
    return nt.values(), lengths


def maybe_td_to_kjt(features: Any, keys: list[str] | None = None) -> KeyedJaggedTensor:
    """`features` itself unless it is a tensordict `TensorDict`; then a KJT with one key per
    entry (`keys`, default: the TensorDict's keys in order): that entry's values and lengths.
    Under TorchScript the input must already be a KJT."""
    if torch._jit_internal.is_scripting() or not _is_tensor_dict(features):
        return features  # type: ignore[no-any-return]  # a KJT (TorchRec passes others through too)
    names = list(features.keys()) if keys is None else list(keys)
    parts = [_jagged_parts(features, k) for k in names]
    if not parts:
        device = getattr(features, "device", None)
        empty = torch.empty(0, dtype=torch.long, device=device)
        return KeyedJaggedTensor(keys=[], values=empty, lengths=empty)
    return KeyedJaggedTensor(
        keys=names,
        values=torch.cat([v for v, _ in parts]),
        lengths=torch.cat([n for _, n in parts]),
    )
