# mypy: disable-error-code="no-untyped-call, no-any-return"
"""Functions in the TorchScript subset that the Python classes' static methods run when scripted.

Scripted code reaches a class's static method (``KeyedTensor.regroup``) as the Python function,
not the twin's method; each such Python function branches on ``is_scripting()`` to one of these,
which build and read the twins of ``_script_types`` (docs/design/torchscript.md). Where the twin
has the same static method (``from_lengths_sync``, ``from_offsets_sync``), the branch calls it
directly, reached through this module's ``ScriptKeyedJaggedTensor``.
"""

import torch

from shardrec_jagged._script_dist import kjt_dist_init
from shardrec_jagged._script_types import (
    ScriptJaggedTensor,
    ScriptKeyedJaggedTensor,
    ScriptKeyedTensor,
)

__all__ = [
    "kjt_dist_init",
    "kjt_empty_like",
    "kjt_from_jt_dict",
    "kt_regroup",
    "kt_regroup_as_dict",
]


def kjt_empty_like(
    kjt: "ScriptKeyedJaggedTensor", device: torch.device | None = None
) -> "ScriptKeyedJaggedTensor":
    w = kjt._weights
    if device is None:
        dev = kjt._values.device
        weights: torch.Tensor | None = None
        if w is not None:
            weights = torch.empty(0, dtype=w.dtype, device=dev)
        return ScriptKeyedJaggedTensor(
            [],
            torch.empty(0, dtype=kjt._values.dtype, device=dev),
            weights,
            torch.empty(0, dtype=kjt.lengths().dtype, device=dev),
            None,
            kjt._stride,
            kjt._stride_per_key_per_rank,
        )
    lengths = kjt._lengths
    offsets = kjt._offsets
    return ScriptKeyedJaggedTensor(
        kjt._keys,
        torch.empty_like(kjt._values, device=device),
        None if w is None else torch.empty_like(w, device=device),
        None if lengths is None else torch.empty_like(lengths, device=device),
        None if offsets is None else torch.empty_like(offsets, device=device),
        kjt._stride,
        kjt._stride_per_key_per_rank,
        kjt._length_per_key,
        kjt._offset_per_key,
    )


def kjt_from_jt_dict(jt_dict: dict[str, ScriptJaggedTensor]) -> "ScriptKeyedJaggedTensor":
    keys: list[str] = []
    values: list[torch.Tensor] = []
    weights: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    strides: list[int] = []
    for key, jt in jt_dict.items():
        keys.append(key)
        values.append(jt.values())
        w = jt.weights_or_none()
        if w is not None:
            weights.append(w)
        lengths.append(jt.lengths())
        strides.append(jt.lengths().numel())
    if len(keys) == 0:  # KeyedJaggedTensor.empty()'s defaults: no keys, no bags
        return ScriptKeyedJaggedTensor(
            [], torch.empty(0), None, torch.empty(0, dtype=torch.int32), None, 0
        )
    if len(weights) != 0 and len(weights) != len(keys):
        raise ValueError("from_jt_dict got weighted and unweighted JaggedTensors")
    same = True
    for s in strides:
        same = same and s == strides[0]
    spkpr: list[list[int]] | None = None
    if not same:
        spkpr = [[s] for s in strides]
    kjt = ScriptKeyedJaggedTensor(
        keys,
        torch.cat(values),
        torch.cat(weights) if len(weights) > 0 else None,
        torch.cat(lengths),
        None,
        strides[0] if same else None,
        spkpr,
    )
    kjt.offset_per_key()
    return kjt


def kt_regroup(
    keyed_tensors: list["ScriptKeyedTensor"], groups: list[list[str]]
) -> list[torch.Tensor]:
    """One tensor per group: its keys' blocks concatenated along `key_dim`."""
    if len(keyed_tensors) == 0:
        raise ValueError("regroup needs at least one KeyedTensor, got an empty list")
    key_dim = keyed_tensors[0]._key_dim
    where: dict[str, tuple[int, int]] = {}
    parts: list[list[torch.Tensor]] = []
    for t, kt in enumerate(keyed_tensors):
        for i, key in enumerate(kt._keys):
            where[key] = (t, i)
        parts.append(list(torch.split_with_sizes(kt._values, kt._length_per_key, key_dim)))
    out: list[torch.Tensor] = []
    for group in groups:
        pieces: list[torch.Tensor] = []
        for key in group:
            if key not in where:
                raise KeyError(f"regroup: unknown key '{key}'")
            t, i = where[key]
            pieces.append(parts[t][i])
        out.append(torch.cat(pieces, key_dim))
    return out


def kt_regroup_as_dict(
    keyed_tensors: list["ScriptKeyedTensor"], groups: list[list[str]], keys: list[str]
) -> dict[str, torch.Tensor]:
    if len(groups) != len(keys):
        raise ValueError(
            f"regroup_as_dict got {len(groups)} groups but {len(keys)} names; "
            "pass one name per group"
        )
    tensors = kt_regroup(keyed_tensors, groups)
    out: dict[str, torch.Tensor] = {}
    for i, key in enumerate(keys):
        out[key] = tensors[i]
    return out
