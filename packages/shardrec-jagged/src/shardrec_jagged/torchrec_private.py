"""TorchRec's private helper names that TorchRec users and TorchRec's own tests import from
``torchrec.sparse.jagged_tensor``; each is the shardrec function of the same meaning.

Served at ``shardrec.sparse.jagged_tensor`` only; shardrec's own code uses the public names.
"""

from __future__ import annotations

import torch.fx

from shardrec_jagged._torch_kernels import to_host_list
from shardrec_jagged.keyed_tensor import KeyedTensor
from shardrec_jagged.regroup import regroup_kts

__all__ = [
    "_all_keys_used_once",
    "_fbgemm_permute_pooled_embs",
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
