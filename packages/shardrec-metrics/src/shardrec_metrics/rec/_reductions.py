"""State reductions by name or function, and gathering a state from every rank.

TorchRec's states name their reduction ("sum", "cat", "max") or give a function of the
gathered values (a stacked tensor for a tensor state, a list of per-rank tensors for a list
state; e.g. `_state_reduction`, which concatenates samples).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._comm import all_gather_columns

__all__ = ["Reduction", "gather_state", "reduce_gathered", "state_reduction"]

Reduction = str | Callable[..., Any] | None


def state_reduction(state: list[Tensor], dim: int = 1) -> list[Tensor]:
    """Samples of several ranks (or batches) as one tensor: `[cat(state, dim)]` (TorchRec's
    `_state_reduction` of the sample-keeping metrics such as AUC)."""
    return [torch.cat(state, dim=dim)]


def _by_name(name: str) -> Callable[[Any], Any]:
    if name == "sum":
        return lambda x: torch.sum(x, dim=0) if isinstance(x, Tensor) else torch.stack(x).sum(0)
    if name == "max":
        return lambda x: torch.amax(x, dim=0) if isinstance(x, Tensor) else torch.stack(x).amax(0)
    if name == "any":
        return lambda x: (x > 0).any(dim=0).to(x.dtype)
    if name == "cat":
        return state_reduction
    raise ValueError(
        f"unknown state reduction {name!r}: use 'sum', 'max', 'any', 'cat' or a function"
    )


def reduce_gathered(reduction: Reduction, gathered: Any) -> Any:
    """Apply a state's reduction to its gathered values (none: the values as gathered)."""
    if reduction is None:
        return gathered
    fn = _by_name(reduction) if isinstance(reduction, str) else reduction
    return fn(gathered)


def gather_state(value: Tensor, group: dist.ProcessGroup | None) -> list[Tensor]:
    """Every rank's `value`, in rank order (the last dimension may differ between ranks)."""
    if group is None or dist.get_world_size(group) == 1:
        return [value]
    shape = value.shape
    cols = value.reshape(1, -1) if value.dim() < 2 else value.reshape(-1, shape[-1])
    blocks = all_gather_columns(cols, group)
    lead = tuple(shape[:-1]) if value.dim() >= 1 else ()
    return [
        b.to(value.device, value.dtype).reshape(*lead, -1) if value.dim() >= 1 else b.reshape(())
        for b in blocks
    ]
