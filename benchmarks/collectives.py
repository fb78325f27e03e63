"""shardrec_collectives vs TorchRec 1.8's dist_data modules on 2 gloo ranks (CPU).

Run: ``.venv/bin/python benchmarks/collectives.py`` (``--quick`` for a smoke run). Two spawned
ranks (shardrec_testing.RankPool) time each collective in alternation with TorchRec's module on
the same tensors: forward only, including the wait, median over repeats of the mean per call,
as seen by rank 0. Reports only; asserts nothing.

Shapes (table-wise, the sharded benchmark's configuration): 26 features, batch B per rank,
about 10 ids per bag, dim 64; each rank owns 13 tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from shardrec_collectives import (
    ShardingEnv,
    kjt_all_to_all,
    pooled_all_to_all,
    reduce_scatter_pooled,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, RankPool

F, MEAN_IDS, DIM = 26, 10, 64


def _timeit(
    pg: dist.ProcessGroup, fns: list[Callable[[], object] | None], inner: int, repeats: int
) -> list[float | None]:
    """Median over repeats of the mean microseconds per call, timed in alternation."""
    for fn in fns:
        if fn is not None:
            for _ in range(3):
                fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if fn is None:
                continue
            dist.barrier(group=pg)
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[i].append((time.perf_counter() - start) / inner * 1e6)
    return [statistics.median(s) if s else None for s in samples]


def _batch(rank: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    lengths = torch.randint(0, 2 * MEAN_IDS + 1, (F * batch,), generator=g)
    values = torch.randint(0, 100_000, (int(lengths.sum()),), generator=g)
    return lengths, values


def bench_rank(
    ctx: RankContext, batch: int, inner: int, repeats: int
) -> list[tuple[str, float, float | None]]:
    torch.set_num_threads(1)
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    keys = [f"f{i}" for i in range(F)]
    splits = [F // world + (1 if r < F % world else 0) for r in range(world)]
    lengths, values = _batch(ctx.rank, batch)
    ours_kjt = KeyedJaggedTensor(keys, values, lengths=lengths, stride=batch)
    per_rank = ours_kjt.split(splits)
    try:
        from torchrec.distributed.dist_data import (
            KJTAllToAll,
            PooledEmbeddingsAllToAll,
            PooledEmbeddingsReduceScatter,
        )
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchRecKJT
    except Exception as exc:  # torchrec missing, or its fbgemm does not load
        print(f"TorchRec column skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
        trc_kjt_fn = trc_pooled_fn = trc_rs_fn = None
    else:
        trc_kjt = TorchRecKJT(keys=keys, values=values, lengths=lengths, stride=batch)
        trc_a2a = KJTAllToAll(ctx.pg, splits)
        trc_pooled = PooledEmbeddingsAllToAll(ctx.pg, [s * DIM for s in splits])
        trc_rs = PooledEmbeddingsReduceScatter(ctx.pg)

        def trc_kjt_fn() -> object:
            return trc_a2a(trc_kjt).wait().wait()

        def trc_pooled_fn() -> object:
            return trc_pooled(local, batch_size_per_rank=[batch] * world).wait()

        def trc_rs_fn() -> object:
            return trc_rs(partial).wait()

    local = torch.randn(batch * world, splits[ctx.rank] * DIM)
    partial = torch.randn(batch * world, F * DIM)
    rows = [
        (
            "kjt_all_to_all",
            lambda: kjt_all_to_all(env, per_rank).wait(),
            trc_kjt_fn,
        ),
        (
            "pooled_all_to_all",
            lambda: pooled_all_to_all(
                env, local, [batch] * world, [s * DIM for s in splits]
            ).wait(),
            trc_pooled_fn,
        ),
        (
            "reduce_scatter_pooled",
            lambda: reduce_scatter_pooled(env, partial, [batch] * world).wait(),
            trc_rs_fn,
        ),
    ]
    out = []
    for name, ours, theirs in rows:
        ours_us, theirs_us = _timeit(ctx.pg, [ours, theirs], inner, repeats)
        assert ours_us is not None
        out.append((name, ours_us, theirs_us))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small batch, few repeats")
    args = parser.parse_args()
    batch, inner, repeats = (128, 3, 3) if args.quick else (1024, 10, 7)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print(
        f"shapes: 2 gloo ranks, {F} features table-wise, batch {batch}/rank, "
        f"~{MEAN_IDS} ids/bag, dim {DIM}"
    )
    with RankPool(2, timeout_s=600) as pool:
        results = pool.run(bench_rank, batch, inner, repeats)[0]
    print(f"{'collective':<24}{'ours (us)':>12}{'TorchRec (us)':>15}{'speedup':>10}")
    for name, ours_us, theirs_us in results:
        if theirs_us is None:
            print(f"{name:<24}{ours_us:>12.0f}{'-':>15}{'-':>10}")
        else:
            print(f"{name:<24}{ours_us:>12.0f}{theirs_us:>15.0f}{theirs_us / ours_us:>9.2f}x")


if __name__ == "__main__":
    main()
