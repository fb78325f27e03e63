"""TorchRec's private helper names that TorchRec users and TorchRec's own tests import from
``torchrec.sparse.jagged_tensor``; each is the shardrec function of the same meaning.

Served at ``shardrec.sparse.jagged_tensor`` only; shardrec's own code uses the public names.
"""

from __future__ import annotations

import itertools

import torch
import torch.fx

from shardrec_jagged._torch_kernels import to_host_list
from shardrec_jagged._validation import UnknownKeyError
from shardrec_jagged.keyed_tensor import KeyedTensor
from shardrec_jagged.regroup import regroup_kts

__all__ = [
    "_all_keys_used_once",
    "_fbgemm_permute_pooled_embs",
    "_kt_regroup_arguments",
    "_regroup_keyed_tensors",
    "_safe_tolist",
]

_safe_tolist = to_host_list  # a tensor's values as a host list (one copy, no device-wide sync)
_regroup_keyed_tensors = regroup_kts  # TorchRec's reference regroup ("legacy")
_fbgemm_permute_pooled_embs = regroup_kts  # TorchRec's fbgemm-backed regroup


@torch.fx.wrap
def _all_keys_used_once(keyed_tensors: list[KeyedTensor], groups: list[list[str]]) -> bool:
    """True when the groups name every key of the inputs exactly once (no key left out, none
    repeated): TorchRec's test of whether a regroup is a pure permutation."""
    held: list[str] = []
    for kt in keyed_tensors:
        held.extend(kt.keys())
    named: list[str] = []
    for group in groups:
        named.extend(group)
    # dicts, not sets: the body stays in the TorchScript subset
    held_once: dict[str, int] = {k: 1 for k in held}
    named_once: dict[str, int] = {k: 1 for k in named}
    return len(held_once) == len(named_once) == len(held) == len(named)


def _kt_regroup_arguments(
    value: torch.Tensor,
    keys: list[list[str]],
    key_lengths: list[list[int]],
    groups: list[list[str]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """The arguments of fbgemm's multi-embedding permute for regrouping KeyedTensors whose keys
    are `keys` (per input) of widths `key_lengths` into `groups` (TorchRec's helper).

    Returns `(permutes, in_shapes, out_shapes, out_lengths)`, the tensors int32 on `value`'s
    device: `permutes` `(P, 6)`, one row per `(group, key)` in order, `[input index, output
    index, start in the input, start in the output, width, jump]`; `in_shapes` the inputs'
    widths; `out_shapes` and `out_lengths` the outputs' widths. `jump` chains the rows of a
    key named in several groups (for the backward pass to sum their gradients): the first
    such row holds the index of the next one, later rows minus the index of the next one, and
    the last one minus the row count; a key used once has 0.
    """
    if len(key_lengths) != len(keys) or any(
        len(w) != len(k) for k, w in zip(keys, key_lengths, strict=False)
    ):
        raise ValueError(f"key_lengths {key_lengths} must give one width per key of keys {keys}")
    where: dict[str, tuple[int, int]] = {}
    for t, names in enumerate(keys):
        start = 0
        for name, width in zip(names, key_lengths[t], strict=True):
            if name in where:
                raise ValueError(
                    f"key {name!r} is held by inputs {where[name][0]} and {t}; a regrouped key "
                    "must come from one input"
                )
            where[name] = (t, start)
            start += width
    widths = {
        name: key_lengths[t][k] for t, names in enumerate(keys) for k, name in enumerate(names)
    }
    rows: list[list[int]] = []
    rows_of: dict[str, list[int]] = {}
    out_lengths: list[int] = []
    for g, group in enumerate(groups):
        out_start = 0
        for name in group:
            if name not in where:
                raise UnknownKeyError(
                    f"group {g} names key {name!r}, held by no input; the inputs hold {keys}"
                )
            t, in_start = where[name]
            rows_of.setdefault(name, []).append(len(rows))
            rows.append([t, g, in_start, out_start, widths[name], 0])
            out_start += widths[name]
        out_lengths.append(out_start)
    for chain in rows_of.values():
        for here, after in itertools.pairwise(chain):
            rows[here][5] = after if here == chain[0] else -after
        if len(chain) > 1:
            rows[chain[-1]][5] = -len(rows)
    device = value.device
    in_lengths = [sum(w) for w in key_lengths]
    as_int32 = [
        torch.tensor(x, dtype=torch.int32).to(device) for x in (rows, in_lengths, out_lengths)
    ]
    permutes = as_int32[0].reshape(len(rows), 6)
    return permutes, as_int32[1], as_int32[2], out_lengths
