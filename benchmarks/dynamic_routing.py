"""The id routing pass of a sharded collection's dynamic (raw-id) tables: hashed vs bucketed.

Run: ``.venv/bin/python benchmarks/dynamic_routing.py`` (``--quick``: fewer repeats). Times
`shardrec_sharding._dynamic_exchange.pack` (one native pass over every table's ids: each
id's owner rank, counts, the send buffer, the way-back positions), the step every batch of a
row-wise sharded raw-id collection runs before its id all-to-all, for 8 row-wise tables x
batch 2048 x 20 ids (327,680 ids; Zipf(1.05) raw ids over 2^40, as benchmarks/dynamic.py) on a
plan of `--world` ranks:

- hash: the routing hash (`mix64(id ^ ROUTE_SALT) mod parts`), every table;
- bucket: `total_num_buckets` routing (TorchRec's rule, `shardrec_sharding.id_buckets`), 10
  buckets per rank over the largest multiple of the bucket count <= 2^40 (skipped where the
  checkout has none);
- floor: one copy of the ids (`torch.Tensor.clone`), the memory traffic any pass pays.

Process CPU time per pass, median of `--repeats`, the cases interleaved round by round (so
load bursts hit them alike), one intra-op thread. Reports only; asserts nothing. Results:
docs/bench/dynamic.md ("Session 12 (branch s12-buckets)").
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch

from shardrec_sharding import _dynamic_exchange as X
from shardrec_sharding.dynamic_routing import ROUTE_SALT

try:
    from shardrec_sharding.id_buckets import bucket_bounds
except ImportError:  # a checkout from before bucket routing
    bucket_bounds = None

TABLES = 8
IDS = 2048 * 20
SPACE = 1 << 40


def _ids(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.05, TABLES * IDS) % SPACE
    perm = np.random.default_rng(7).permutation(1 << 20).astype(np.int64)
    return torch.from_numpy(ranks * 977 + perm[ranks % (1 << 20)]) % SPACE


def _plans(world: int) -> dict[str, X.RoutePlan]:
    owners = tuple(range(world))
    if bucket_bounds is None:  # routes were (replicated, owners) before bucket routing
        old = [(False, owners)] * TABLES
        return {"hash": X.RoutePlan.of(old, world, ROUTE_SALT)}  # type: ignore[arg-type]
    buckets = 10 * world
    rows = [10 * 8] * world  # 8 slots per bucket
    bounds = bucket_bounds("t", buckets, SPACE // buckets * buckets, buckets * 8, rows)
    return {
        "hash": X.RoutePlan.of([(False, owners, ())] * TABLES, world, ROUTE_SALT),
        "bucket": X.RoutePlan.of([(False, owners, bounds)] * TABLES, world, ROUTE_SALT),
    }


def _cpu_ms(fn: object, inner: int) -> float:
    start = time.process_time()
    for _ in range(inner):
        fn()  # type: ignore[operator]
    return (time.process_time() - start) * 1000 / inner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--inner", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 5
    torch.set_num_threads(1)
    ids = _ids(0)
    lens = [IDS] * TABLES
    plans = _plans(args.world)
    if X._native() is None:
        raise SystemExit("the native kernels are off: this benchmark times the native pass")
    cases = {name: (lambda p=plan: X.pack(p, ids, lens)) for name, plan in plans.items()}
    cases["floor"] = ids.clone
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            times[name].append(_cpu_ms(fn, args.inner))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}; torch {torch.__version__}"
    )
    print(f"shapes: {TABLES} tables x {IDS} ids, world {args.world}, {args.repeats} rounds")
    floor = statistics.median(times["floor"])
    for name, t in times.items():
        med = statistics.median(t)
        rate = TABLES * IDS / med / 1000
        print(f"{name:7s} {med:8.3f} ms CPU  {rate:7.1f} M ids/s  {med / floor:5.1f}x floor")


if __name__ == "__main__":
    main()
