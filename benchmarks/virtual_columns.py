"""A column_wise raw-id tier (`dram_virtual_table` / `ssd_virtual_table`) vs the same table in
memory, on 2 gloo ranks (CPU).

Run: ``.venv/bin/python benchmarks/virtual_columns.py`` (``--quick`` for a smoke run). Two
spawned ranks (shardrec_testing.RankPool) shard one dynamic table of `--capacity` slots x dim
64 and time a training step (forward + backward with the fused row-wise Adagrad) of batch
`--batch` per rank, ~10 ids per bag, Zipf(1.05) raw ids over a pool of `--pool` distinct ids
(so the table evicts). Plans, timed in alternation (one step of each per round, `--rounds`):

- `memory column_wise`: the in-memory dynamic table (kernel fused; evicted ids lose their row);
- `dram column_wise`, `ssd column_wise`: the raw-id tier, each rank a cache over its column
  block (shardrec_sharding/virtual_columns.py), RAM / RocksDB store;
- `ssd table_wise`: the tier on rank 1 alone, for comparison.

Prints the machine, the shapes, and per plan rank 0's and rank 1's median process CPU time per
step and the median wall time (rank 0), plus the cache hit rate (column-split: every rank's is
the same; table_wise: rank 1's). Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    KeyValueParams,
    column_wise,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, RankPool

DIM, MEAN_IDS = 64, 10
FUSED = {"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.01}
PLANS = ["memory column_wise", "dram column_wise", "ssd column_wise", "ssd table_wise"]
_STATE: dict[str, object] = {}


def _zipf_pool(pool: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-(2**40), 2**40, size=pool, dtype=np.int64)


def _batch(rank: int, step: int, batch: int, pool: np.ndarray) -> KeyedJaggedTensor:
    rng = np.random.default_rng((rank, step))
    lengths = rng.poisson(MEAN_IDS, size=batch)
    ranks = (rng.zipf(1.05, size=int(lengths.sum())) - 1) % pool.size
    return KeyedJaggedTensor(
        ["f"], torch.from_numpy(pool[ranks]), lengths=torch.from_numpy(lengths)
    )


def setup_rank(ctx: RankContext, plan: str, capacity: int, store: str) -> None:
    kind, sharding = plan.split()
    kernel = {"memory": "fused", "dram": "dram_virtual_table", "ssd": "ssd_virtual_table"}[kind]
    config = EmbeddingBagConfig(
        name="raw",
        num_embeddings=capacity,
        embedding_dim=DIM,
        feature_names=["f"],
        dynamic=DynamicTableConfig(),
    )
    ebc = EmbeddingBagCollection([config])
    where = (
        column_wise(ranks=[0, 1], compute_kernel=kernel)
        if sharding == "column_wise"
        else table_wise(rank=1, compute_kernel=kernel)
    )
    tables = construct_module_sharding_plan(ebc, {"raw": where}, world_size=2)
    tables["raw"] = dataclasses.replace(
        tables["raw"], key_value_params=KeyValueParams(ssd_storage_directory=store)
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=FUSED)
    _STATE[plan] = sharder.shard(ebc, tables, ShardingEnv.from_process_group(ctx.pg))


def timed_step(
    ctx: RankContext, plan: str, step: int, batch: int, pool: np.ndarray
) -> tuple[float, float, float]:
    """(process CPU ms, wall ms, cache hit rate so far) of one training step of `plan`."""
    sharded = _STATE[plan]
    kjt = _batch(ctx.rank, step, batch, pool)
    start, cpu = time.perf_counter(), time.process_time()
    out = sharded(kjt).wait().values()  # type: ignore[operator]
    out.sum().backward()
    wall = (time.perf_counter() - start) * 1e3
    cpu_ms = (time.process_time() - cpu) * 1e3
    cache = getattr(sharded.dynamic_tables.table("raw"), "cache", None)  # type: ignore[attr-defined]
    hits = 0.0 if cache is None else cache.hits / max(1, cache.hits + cache.misses)
    return cpu_ms, wall, hits


def drop_rank(ctx: RankContext) -> None:
    _STATE.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--pool", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.capacity, args.pool, args.batch, args.rounds, args.warmup = 2000, 20_000, 64, 4, 2
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.2f}; torch {torch.__version__}"
    )
    print(
        f"shapes: 1 dynamic table, capacity {args.capacity} x dim {DIM}, batch {args.batch} "
        f"per rank x ~{MEAN_IDS} ids, Zipf(1.05) over {args.pool} raw ids; 2 gloo ranks; "
        f"row-wise Adagrad; {args.rounds} rounds after {args.warmup} warm-up steps"
    )
    pool = _zipf_pool(args.pool, 0)
    got: dict[str, list[tuple[float, float, float, float]]] = {p: [] for p in PLANS}
    with tempfile.TemporaryDirectory() as root, RankPool(2) as ranks:
        for plan in PLANS:
            ranks.run(setup_rank, plan, args.capacity, os.path.join(root, plan.replace(" ", "-")))
        for step in range(args.warmup + args.rounds):
            for plan in PLANS:
                per = ranks.run(timed_step, plan, step, args.batch, pool)
                if step >= args.warmup:
                    hit = max(per[0][2], per[1][2])  # table_wise: rank 1's cache
                    got[plan].append((per[0][0], per[1][0], per[0][1], hit))
        ranks.run(drop_rank)
    base = statistics.median(r[0] for r in got[PLANS[0]])
    print(
        f"{'plan':<20} {'cpu r0 ms':>10} {'cpu r1 ms':>10} {'wall ms':>9} {'hit':>6} {'x mem':>6}"
    )
    for plan in PLANS:
        rows = got[plan]
        c0 = statistics.median(r[0] for r in rows)
        c1 = statistics.median(r[1] for r in rows)
        wall = statistics.median(r[2] for r in rows)
        hit = rows[-1][3]
        print(f"{plan:<20} {c0:>10.2f} {c1:>10.2f} {wall:>9.2f} {hit:>6.1%} {c0 / base:>6.2f}")


if __name__ == "__main__":
    main()
