"""The graph functions of the quantized collections' `torch.fx`-traced forwards.

Traced (with `shardrec.fx.symbolic_trace`), a quantized collection becomes TorchRec's graph
shape: a first `_get_kjt_keys` node, one call of its lookup module, and, for the unpooled
collection, the `(F, B)` lengths (`unflattened_lengths`) with a batching hint
(`batching_hinted_output`) that graph rewriters of TorchRec's inference stack look for. Each
function is an fx leaf (`torch.fx.wrap` in the module that calls it) and TorchScript-compatible,
so the traced module scripts.
"""

import torch

from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING",
    "batching_hinted_output",
    "unflattened_lengths",
]

# Set to True on a quantized EmbeddingCollection: its traced graph hints batching with the
# `(F, B)` lengths instead of the flat `(F * B,)` ones (TorchRec's attribute and value).
MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING = "__use_unflattened_lengths_for_batching"


def _get_kjt_keys(features: KeyedJaggedTensor) -> list[str]:
    """The KJT's keys; TorchRec's graph names this first node `_get_kjt_keys`."""
    return features.keys()


def unflattened_lengths(lengths: torch.Tensor, keys: list[str], stride: int) -> torch.Tensor:
    """`(F * B,)` lengths as `(F, B)`, F = len(keys), B = stride."""
    return lengths.view(len(keys), stride)


def batching_hinted_output(lengths: torch.Tensor, output: list[torch.Tensor]) -> list[torch.Tensor]:
    """`output` unchanged: a graph marker tying the lookup's rows to the lengths batching them."""
    return output
