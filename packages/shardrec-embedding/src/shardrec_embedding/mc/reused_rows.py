"""Which rows an MC embedding collection must reset: rows handed to a new id that another id held
before (its vector must not be inherited), not rows no id has held yet.

An MCH module's `evict()` names every row handed to a new id, also rows whose slot was empty
(as TorchRec's). Such a row still holds the table's initial weights, untouched by training (ids
without a slot read the reserved miss row), so it is left as it is: then a table that has
evicted nothing trains exactly as TorchRec's (same rows, same weights, no extra draws from
torch's generator). MCH slots never become empty again, so the rows some id has held are the
rows an id holds now: the mask is read off the module's state when first needed (again after
a state-dict load) and kept up to date from the rows handed out at each step. HashZch's
`evict()` already names only rows taken from another id.
"""

import torch
from torch import nn

from shardrec_embedding.mc.mch import MCHManagedCollisionModule

__all__ = ["ReusedRows"]

_INT64_MAX = torch.iinfo(torch.int64).max


def _held_mask(module: nn.Module) -> torch.Tensor | None:
    """`(zch_size,)` bool, rows holding an id now; None where every handed-out row is reset
    (other module kinds, row-wise shards, `meta`)."""
    if not isinstance(module, MCHManagedCollisionModule):
        return None
    ids = module._mch_sorted_raw_ids
    if ids.device.type == "meta" or module._output_global_offset != 0:
        return None
    mask = torch.zeros(module._zch_size, dtype=torch.bool, device=ids.device)
    mask[module._mch_remapped_ids_mapping[ids != _INT64_MAX]] = True
    return mask


class ReusedRows:
    """Per table, the rows some id has held (see the module docstring)."""

    def __init__(self) -> None:
        self._masks: dict[str, torch.Tensor | None] | None = None

    def invalidate(self) -> None:
        """Read the masks off the modules' state again (after a state-dict load)."""
        self._masks = None

    def prepare(self, modules: nn.ModuleDict) -> None:
        """Before the collection's forward (`modules`: its MC modules by table): read the masks
        if they are not current."""
        if self._masks is None:
            self._masks = {table: _held_mask(module) for table, module in modules.items()}

    def reused(self, handed_out: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
        """Of each table's rows handed to new ids this step, those some id held before; marks
        all of them held."""
        masks = self._masks or {}
        out: dict[str, torch.Tensor | None] = {}
        for table, rows in handed_out.items():
            mask = masks.get(table)
            if rows is None or mask is None or rows.numel() == 0:
                out[table] = rows
                continue
            rows = rows.to(device=mask.device, dtype=torch.int64)
            out[table] = rows[mask[rows]]
            mask[rows] = True
        return out
