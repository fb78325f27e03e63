"""Checkpoints of a tiered table (issue 29): time and peak memory of `save` / `load`.

One gloo rank; one table of `--rows` x 64 float32 with rowwise Adagrad, placed table_wise
with `compute_kernel="key_value"` (rows on disk, a cache of 1% in memory), built on the meta
device so that no full copy of the table ever exists in memory. Prints, for `save` and for
`load` of the same checkpoint: seconds, the table's bytes, and the resident memory the call
added at its peak (sampled every 5 ms), beside the table's size: a streamed checkpoint
should add about one chunk (`shardrec_tiered.checkpoint.CHUNK_BYTES`, 64 MiB) per block
(weight, state), not the table.

Numbers need a quiet machine (docs/benchmarks.md). `--quick`: 200,000 rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_tiered import checkpoint as tiered_checkpoint

DIM = 64
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_added(fn: Callable[[], None]) -> tuple[float, int]:
    """(seconds, peak resident bytes added) of `fn()`."""
    base = rss()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    try:
        fn()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
    return seconds, max(peak[0], rss()) - base


def build(rows: int, store: str) -> DistributedModelParallel:
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="big", num_embeddings=rows, embedding_dim=DIM, feature_names=["f"]
            )
        ],
        device=torch.device("meta"),
    )
    plan = construct_module_sharding_plan(
        ebc, {"big": table_wise(rank=0, compute_kernel="key_value")}, world_size=1
    )
    plan["big"] = dataclasses.replace(
        plan["big"],
        key_value_params=KeyValueParams(ssd_storage_directory=store),
        cache_params=CacheParams(load_factor=0.01),
    )
    return DistributedModelParallel(
        ebc,
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=ShardingPlan(plan={"": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="200,000 rows")
    parser.add_argument("--dir", default=None, help="where stores and checkpoints go")
    args = parser.parse_args()
    if args.quick:
        args.rows = 200_000
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="tiered-ckpt-") as root:
            run(args.rows, root)
    else:
        run(args.rows, args.dir)


def run(rows: int, root: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = build(rows, os.path.join(root, "store-a"))
    table = rows * (DIM + 1) * 4
    path = os.path.join(root, "ckpt")
    save_s, save_rss = peak_added(lambda: save(path, model, {"fused": model.fused_optimizer}))
    other = build(rows, os.path.join(root, "store-b"))
    load_s, load_rss = peak_added(lambda: load(path, other, {"fused": other.fused_optimizer}))
    mib = 1 << 20
    print(f"machine: {platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}")
    print(
        f"table: {rows} rows x {DIM} float32 + rowwise Adagrad = {table / mib:.0f} MiB "
        f"(chunk {tiered_checkpoint.CHUNK_BYTES / mib:.0f} MiB of store rows)"
    )
    for what, seconds, added in [("save", save_s, save_rss), ("load", load_s, load_rss)]:
        print(
            f"{what}: {seconds:.2f} s ({table / mib / seconds:.0f} MiB/s), peak RSS added "
            f"{added / mib:.0f} MiB = {added / table:.2f}x the table"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
