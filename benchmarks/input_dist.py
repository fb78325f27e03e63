"""The sharded input dist in one exchange vs two, on 2 gloo ranks (CPU), same processes.

Run: ``.venv/bin/python benchmarks/input_dist.py`` (``--quick`` for a smoke run). The shapes of
`benchmarks/sharded.py` (26 tables x 100k rows x dim 64, batch 1024 per rank, ~10 ids per bag,
fused rowwise Adagrad, 2 spawned ranks, one intra-op thread each). Each sharding type's module
is timed two ways, step by step in alternation: "one exchange" (the strategies' learned
`ExchangeCapacity`: header and ids in one all-to-all) and "two exchanges" (no capacity: the
header all-to-all, blocking, then the ids: the exchange before session 10). Timed as seen by
rank 0: `input_dist(kjt).wait()` alone (checks, send buffer, exchanges, regroup), and a whole
training step (forward + backward); wall ms and process CPU ms, medians. Reports only;
asserts nothing. Run with `SHARDREC_WT=<checkout>` on a checkout from before session 10, both
modes time that checkout's exchange (interleaved A/B runs of two checkouts).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, RankPool

MEAN_IDS, DIM = 10, 64
FUSED = {"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.01}
TYPES = ["table_wise", "row_wise"]
MODES = ["one exchange", "two exchanges"]

_STATE: dict[str, object] = {}  # per rank process: the built module, batch and capacities


def setup_rank(ctx: RankContext, kind: str, tables: int, rows: int, batch: int) -> None:
    torch.set_num_threads(1)
    configs = {
        f"t{t}": EmbeddingBagConfig(
            name=f"t{t}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f"f{t}"]
        )
        for t in range(tables)
    }
    plan = construct_module_sharding_plan(
        EmbeddingBagCollection(list(configs.values()), device="meta"),
        {
            n: table_wise(rank=i % 2) if kind == "table_wise" else row_wise()
            for i, n in enumerate(configs)
        },
        world_size=2,
    )
    sharded = EmbeddingBagCollectionSharder(fused_params=FUSED).shard(
        EmbeddingBagCollection(list(configs.values()), device="meta"),
        plan,
        ShardingEnv.from_process_group(ctx.pg),
    )
    g = torch.Generator().manual_seed(ctx.rank)
    lengths = torch.randint(0, 2 * MEAN_IDS + 1, (tables * batch,), generator=g)
    values = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    kjt = KeyedJaggedTensor([f"f{t}" for t in range(tables)], values, lengths=lengths, stride=batch)
    strategies = list(sharded._strategies)
    _STATE.update(
        module=sharded,
        kjt=kjt,
        strategies=strategies,
        # (None everywhere on a checkout without capacities: both modes are its one path)
        capacities=[getattr(s, "_capacity", None) for s in strategies],
    )
    for _ in range(2):  # warm-up: the capacities learn the sizes
        sharded(kjt).wait().values().sum().backward()


def timed(ctx: RankContext, mode: str) -> tuple[float, float, float, float]:
    """(input-dist wall ms, CPU ms, step wall ms, CPU ms) of one input dist and one step."""
    sharded = _STATE["module"]
    kjt = _STATE["kjt"]
    for s, c in zip(_STATE["strategies"], _STATE["capacities"], strict=True):  # type: ignore[call-overload]  # set by setup_rank
        s._capacity = c if mode == MODES[0] else None
    out: list[float] = []
    dist.barrier(group=ctx.pg)
    start, cpu = time.perf_counter(), time.process_time()
    sharded.input_dist(kjt).wait()  # type: ignore[attr-defined]  # the sharded EBC
    out += [(time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3]
    dist.barrier(group=ctx.pg)
    start, cpu = time.perf_counter(), time.process_time()
    sharded(kjt).wait().values().sum().backward()  # type: ignore[operator]  # the sharded EBC
    out += [(time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3]
    return out[0], out[1], out[2], out[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--types", default=",".join(TYPES), help="sharding types, comma-separated")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per mode")
    args = parser.parse_args()
    tables, rows, batch, repeats = (4, 10_000, 128, 3) if args.quick else (26, 100_000, 1024, 15)
    if args.repeats is not None:
        repeats = args.repeats
    print(f"machine: {platform.platform()}, 1 intra-op thread per rank, ", end="")
    print(f"{os.cpu_count()} cpus, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"shapes: {tables} tables x {rows} rows x dim {DIM}, batch {batch} per rank, 2 ranks")
    print(f"1-minute load average before: {os.getloadavg()[0]:.1f}")
    print("| type | mode | input dist ms (CPU ms) | step ms (CPU ms) |")
    print("|---|---|---|---|")
    pool = RankPool(2, timeout_s=1800)
    try:
        pool.start()
        for kind in [t for t in args.types.split(",") if t]:
            pool.run(setup_rank, kind, tables, rows, batch)
            got: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in MODES}
            for _ in range(repeats):
                for mode in MODES:
                    got[mode].append(pool.run(timed, mode)[0])
            for mode in MODES:
                med = [statistics.median(x[i] for x in got[mode]) for i in range(4)]
                times = f"{med[0]:.2f} ({med[1]:.2f}) | {med[2]:.1f} ({med[3]:.1f})"
                print(f"| {kind} | {mode} | {times} |")
    finally:
        pool.close()
    print(f"1-minute load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
