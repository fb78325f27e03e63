"""The cost of a sharded raw-id table's undo record on the good path (docs/dynamic.md, "when
an owner fails"): one owner part's id -> slot step with and without it.

Run: ``.venv/bin/python benchmarks/dynamic_undo.py`` (``--quick``: small shapes).
A sharded collection's owner maps each table's exchanged ids with `start_undo()` before and
`commit_step()` after (`shardrec_sharding.dynamic_routing`); this times exactly that map step
(`DynamicTable.map_ids(training=True)`) on one table of a row_wise part's shape (capacity 50k:
the 100k table of benchmarks/dynamic_sharded.py on 2 ranks; 40,960 ids: 2 ranks x batch 2048 x
20 ids / 2 parts), LRU on the native map, pre-filled to 50% or 95%, with Zipf(1.05) ids over
the resident ids ("resident": few new ids) or over 2^40 ("stream": every step admits and
evicts). Two identical tables take the same ids, step after step; which of them records and which
runs first cycle, so that load bursts, caches and memory placement favour neither; median
process-CPU microseconds per step and the ratio.
Reports only; asserts nothing. Results: docs/bench/dynamic.md ("Undo record").
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

from shardrec_embedding.dynamic import DynamicTableConfig, EvictionPolicy
from shardrec_embedding.dynamic.table import DynamicTable


def _table(capacity: int) -> DynamicTable:
    cfg = DynamicTableConfig(eviction=EvictionPolicy.LRU)
    cfg.validate("t", capacity)
    table = DynamicTable("t", cfg, capacity, 64)
    table.in_flight.defer_resets = True  # as in a sharded collection
    return table


def _zipf(rng: np.random.Generator, n: int, pool: np.ndarray) -> torch.Tensor:
    ranks = rng.zipf(1.05, size=n * 2)
    ranks = ranks[ranks <= pool.size][:n] - 1
    return torch.from_numpy(pool[ranks].astype(np.int64))


def run(capacity: int, ids: int, occupancy: float, regime: str, steps: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    resident = rng.integers(-(2**62), 2**62, size=int(capacity * occupancy))
    tables = [_table(capacity), _table(capacity)]
    fill = torch.from_numpy(resident)
    for t in tables:
        t.map_ids(fill, training=True)
    pool = resident if regime == "resident" else rng.integers(0, 2**40, size=1 << 22)
    times: dict[str, list[float]] = {"plain": [], "recorded": []}
    for step in range(steps):
        batch = _zipf(rng, ids, pool)
        # which table records, and which runs first, cycle: neither table's memory placement
        # nor the order favours one side
        roles = [("recorded", tables[step % 2]), ("plain", tables[1 - step % 2])]
        for name, table in roles if step % 4 < 2 else roles[::-1]:
            table.in_flight.flush_resets()
            start = time.process_time()
            if name == "recorded":
                table.start_undo()
            table.map_ids(batch, training=True)
            if name == "recorded":
                table.commit_step()
            times[name].append(time.process_time() - start)
    assert torch.equal(tables[0].slot_ids, tables[1].slot_ids)  # the same decisions
    return statistics.median(times["plain"]) * 1e6, statistics.median(times["recorded"]) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few steps")
    args = parser.parse_args()
    capacity, ids, steps = (4_000, 2_000, 20) if args.quick else (50_000, 40_960, 200)
    torch.set_num_threads(1)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cpus, 1 thread, torch ", end="")
    print(f"{torch.__version__}, python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    print(f"one table: capacity {capacity}, {ids} ids a step, LRU, native map, {steps} steps")
    print(f"{'regime':<10}{'occupancy':>10}{'plain us':>12}{'recorded us':>13}{'ratio':>8}")
    for regime in ("resident", "stream"):
        for occupancy in (0.5, 0.95):
            a, b = run(capacity, ids, occupancy, regime, steps)
            print(f"{regime:<10}{occupancy:>10.0%}{a:>12.0f}{b:>13.0f}{b / a:>8.3f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
