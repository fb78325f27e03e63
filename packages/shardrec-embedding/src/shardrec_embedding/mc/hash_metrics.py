"""`ScalarLogger` (TorchRec's `hash_mc_metrics`): reports a HashZch module's counters.

shardrec's HashZch module counts lookups, hits, inserts, evictions and collisions itself
(`module.stats`); this logger reports them, with occupancy, every `frequency` calls.
"""

from __future__ import annotations

import logging

import torch

from shardrec_embedding.mc.hash_zch import HashZchManagedCollisionModule

__all__ = ["ScalarLogger"]

_LOG = logging.getLogger(__name__)


class ScalarLogger(torch.nn.Module):
    """Logs `module.stats` and occupancy of `module` every `frequency` calls (INFO level)."""

    def __init__(self, module: HashZchManagedCollisionModule, frequency: int = 100) -> None:
        super().__init__()
        if frequency < 1:
            raise ValueError(f"ScalarLogger: frequency must be >= 1 calls, got {frequency}")
        self._target = [module]  # not a submodule: the logger does not own the table
        self._frequency = frequency
        self._calls = 0

    def forward(self, run_type: str = "train") -> dict[str, float]:
        self._calls += 1
        module = self._target[0]
        stats = module.stats
        occupied = module.output_size() - int(module.open_slots().item())
        report = {
            "occupancy": occupied / module.output_size(),
            "lookups": float(stats.lookups),
            "hit_rate": stats.hits / max(stats.lookups, 1),
            "inserts": float(stats.inserts),
            "evictions": float(stats.evictions),
            "collisions": float(stats.collisions),
        }
        if self._calls % self._frequency == 0:
            _LOG.info("hash zch %s %s: %s", module._name, run_type, report)
        return report
