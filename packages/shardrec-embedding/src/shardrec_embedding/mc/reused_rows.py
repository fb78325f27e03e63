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


def _held_mask(module: nn.Module) -> tuple[torch.Tensor, int] | None:
    """`((zch_size,) bool, first row)`: the module's rows holding an id now (a row-wise shard's
    own rows, from its first global row); None where every handed-out row is reset (other
    module kinds, `meta`)."""
    if not isinstance(module, MCHManagedCollisionModule):
        return None
    ids = module._mch_sorted_raw_ids
    if ids.device.type == "meta":
        return None
    offset = module._output_global_offset
    mask = torch.zeros(module._zch_size, dtype=torch.bool, device=ids.device)
    mask[module._mch_remapped_ids_mapping[ids != _INT64_MAX] - offset] = True
    return mask, offset


class ReusedRows:
    """Per table, the rows some id has held (see the module docstring)."""

    def __init__(self) -> None:
        self._masks: dict[str, tuple[torch.Tensor, int] | None] | None = None

    def invalidate(self) -> None:
        """Read the masks off the modules' state again (after a state-dict load)."""
        self._masks = None

    def prepare(self, modules: nn.ModuleDict) -> None:
        """Before the MC modules' forward (`modules`: them by table, a sharded collection's
        this rank's): read the masks if they are not current."""
        if self._masks is None:
            self._masks = {table: _held_mask(module) for table, module in modules.items()}

    def reused(self, handed_out: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
        """Of each table's rows (global) handed to new ids this step, those some id held
        before; marks all of them held."""
        masks = self._masks or {}
        out: dict[str, torch.Tensor | None] = {}
        for table, rows in handed_out.items():
            held = masks.get(table)
            if rows is None or held is None or rows.numel() == 0:
                out[table] = rows
                continue
            mask, offset = held
            local = rows.to(device=mask.device, dtype=torch.int64) - offset
            out[table] = rows[mask[local].to(rows.device)]
            mask[local] = True
        return out
