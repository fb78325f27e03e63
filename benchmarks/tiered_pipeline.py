"""Tiered tables through the train pipelines (issue 29, "Prefetch"): the same model and ids as
`tiered.py`, sharded by DistributedModelParallel on one rank (every table `table_wise`), run by

    in RAM, TrainPipelineSparseDist               plan kernel fused
    tiered, plain loop                            key_value: each forward loads its misses
    tiered, TrainPipelineSparseDist               prefetch of i+1 overlaps backward(i)
    tiered, PrefetchTrainPipelineSparseDist       prefetch of i+1 overlaps forward + backward(i)

with a cache of `--cache` of each table's rows (raised to two batches' distinct rows where that
is fewer: the batch awaiting backward and the one prefetched). Prints ms per step, the ratio to
in-RAM, the hit rate, and the prefetch time with the part a forward still waited for (exposed)
and the rest (hidden behind compute).

Numbers need a quiet machine (docs/benchmarks.md). `--quick`: small shapes, seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator

import numpy as np
import torch
from tiered import SPEC, distinct_per_table, make_batches, shape_arguments
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    DistributedModelParallel,
    PrefetchTrainPipelineSparseDist,
    TrainPipelineSparseDist,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


class Model(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name=f"t{i}",
                    num_embeddings=args.rows,
                    embedding_dim=args.dim,
                    feature_names=[f"f{i}"],
                    init_fn=lambda w: nn.init.uniform_(w, -0.01, 0.01),
                )
                for i in range(args.tables)
            ],
            device=torch.device("meta"),
        )

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        out = self.sparse(batch.sparse_features).values()
        return out.sum(), out


def to_batches(args: argparse.Namespace, dist: str) -> list[Batch]:
    out = []
    for ids, _ in make_batches(args, dist):
        per = args.batch * args.pooling
        shift = torch.arange(args.tables).repeat_interleave(per) * args.rows
        kjt = KeyedJaggedTensor(
            [f"f{i}" for i in range(args.tables)],
            ids - shift,
            lengths=torch.full((args.tables * args.batch,), args.pooling),
        )
        out.append(Batch(kjt))
    return out


def wrap(args: argparse.Namespace, store: str | None, cache_rows: int) -> DistributedModelParallel:
    model = Model(args)
    kernel = "fused" if store is None else "key_value"
    plan = construct_module_sharding_plan(
        model.sparse,
        {f"t{i}": table_wise(rank=0, compute_kernel=kernel) for i in range(args.tables)},
        world_size=1,
    )
    if store is not None:
        for name in plan:
            plan[name] = dataclasses.replace(
                plan[name],
                key_value_params=KeyValueParams(ssd_storage_directory=store),
                cache_params=CacheParams(load_factor=cache_rows / args.rows),
            )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_local(1, 0),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def tier_stats(dmp: DistributedModelParallel) -> dict[str, float]:
    sharded = next(m for m in dmp.modules() if isinstance(m, ShardedEmbeddingBagCollection))
    out = dict.fromkeys(("hits", "misses", "prefetch", "exposed"), 0.0)
    for s in sharded._strategies:
        for m in s.lookup.tiered_modules():
            stats = m.stats()
            out["hits"] += sum(v["hits"] for v in stats.values())
            out["misses"] += sum(v["misses"] for v in stats.values())
            out["prefetch"] += m.prefetch_seconds
            out["exposed"] += m.exposed_seconds
    return out


def run(
    dmp: DistributedModelParallel, batches: list[Batch], how: str, warmup: int
) -> tuple[float, float]:
    """Median ms per step over the timed steps (each step: forward, backward, step), wall
    time and the process's CPU time (all its threads: the prefetch worker's too)."""
    times: list[float] = []
    cpu: list[float] = []
    opt = dmp.fused_optimizer

    def plain(i: int) -> None:
        loss, _ = dmp(batches[i])
        loss.backward()
        opt.step()

    step = plain
    if how != "plain":
        cls = TrainPipelineSparseDist if how == "sparse_dist" else PrefetchTrainPipelineSparseDist
        pipe = cls(dmp, opt, torch.device("cpu"))
        it: Iterator[Batch] = iter(batches)
        step = lambda i: pipe.progress(it)  # noqa: E731  # one step of the pipeline
    for i in range(len(batches)):
        start, start_cpu = time.perf_counter(), time.process_time()
        step(i)
        if i >= warmup:
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return 1e3 * float(np.median(times)), 1e3 * float(np.median(cpu))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    shape_arguments(p)
    p.add_argument("--cache", type=float, default=0.10, help="cached share of each table's rows")
    p.add_argument("--dists", default="zipf,uniform")
    p.add_argument("--store", default=None, help="store directory (default: a temporary one)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.quick:
        args.tables, args.rows, args.batch, args.steps, args.warmup = 4, 20_000, 256, 5, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads"
    )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"shapes: {args.tables} tables x {args.rows} rows x dim {args.dim}, batch {args.batch}, "
        f"{args.pooling} id(s) per bag, rowwise Adagrad, cache {args.cache:.0%}, "
        f"{args.steps} timed steps, one rank"
    )
    with tempfile.TemporaryDirectory(dir=args.store) as root:
        for dist in args.dists.split(","):
            batches = to_batches(args, dist)
            least = distinct_per_table(make_batches(args, dist), args)
            rows = max(round(args.cache * args.rows), 2 * least)
            ram, ram_cpu = run(wrap(args, None, rows), batches, "sparse_dist", args.warmup)
            print(
                f"\n{dist} ids (a batch touches up to {least} rows of a table; cache {rows} rows)"
            )
            print(
                f"  in RAM, TrainPipelineSparseDist            {ram:8.2f} ms/step  CPU "
                f"{ram_cpu:7.2f} ms/step"
            )
            for how, label in (
                ("plain", "tiered, plain loop"),
                ("sparse_dist", "tiered, TrainPipelineSparseDist"),
                ("prefetch", "tiered, PrefetchTrainPipelineSparseDist"),
            ):
                store = os.path.join(root, f"{dist}-{how}")
                dmp = wrap(args, store, rows)
                ms, cpu = run(dmp, batches, how, args.warmup)
                s = tier_stats(dmp)
                del dmp
                shutil.rmtree(store, ignore_errors=True)
                rate = s["hits"] / max(1.0, s["hits"] + s["misses"])
                per_step = 1e3 / len(batches)
                print(
                    f"  {label:42s} {ms:8.2f} ms/step  {ms / ram:5.2f}x  CPU {cpu:7.2f} ms/step "
                    f"{cpu / ram_cpu:5.2f}x  hit rate {rate:6.1%}  "
                    f"prefetch {s['prefetch'] * per_step:7.2f} ms/step, exposed "
                    f"{s['exposed'] * per_step:7.2f}, hidden "
                    f"{(s['prefetch'] - s['exposed']) * per_step:7.2f}"
                )


if __name__ == "__main__":
    main()
