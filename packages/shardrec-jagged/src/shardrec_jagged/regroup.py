"""TorchRec's free functions that regroup pooled embeddings (``torchrec.sparse.jagged_tensor``).

``regroup_kts`` and ``permute_multi_embedding`` give exactly ``KeyedTensor.regroup``'s result
(TorchRec runs them on different fbgemm operators; ours share one implementation: one split per
input into views, one cat per group, differentiable). A key may appear in several groups or in
none. Each is a torch.fx leaf, and its body is in the TorchScript subset, so a module calling it
traces and scripts.
"""

from __future__ import annotations

import torch
import torch.fx

from shardrec_jagged import keyed_tensor as _kt
from shardrec_jagged.keyed_tensor import KeyedTensor

__all__ = ["permute_multi_embedding", "regroup_kts"]


@torch.fx.wrap
def regroup_kts(keyed_tensors: list[KeyedTensor], groups: list[list[str]]) -> list[torch.Tensor]:
    """One tensor per group of keys, each its keys' blocks concatenated along ``key_dim``.

    Args:
        keyed_tensors: the inputs (typically pooled embeddings, ``(B, width)`` per key).
        groups: key names per output; every name must be held by one input.
    """
    # Through the module: under fx tracing its patched (leaf) _regroup is the one called.
    return _kt._regroup(keyed_tensors, groups)


@torch.fx.wrap
def permute_multi_embedding(
    keyed_tensors: list[KeyedTensor], groups: list[list[str]]
) -> list[torch.Tensor]:
    """The same as ``regroup_kts`` (TorchRec's name for its multi-embedding permute kernel)."""
    # Through the module: under fx tracing its patched (leaf) _regroup is the one called.
    return _kt._regroup(keyed_tensors, groups)
