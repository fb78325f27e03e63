"""Checkpoints moved between a dynamic table in memory and a raw-id tier (issue 29): time.

One gloo rank; one dynamic table of `--ids` raw ids x 64 float32 with rowwise Adagrad, filled
directly (its id map loaded with `--ids` random int64 ids, random rows), saved planned
`fused` (in memory) and planned `dram_virtual_table` / `ssd_virtual_table` (the same ids in
the tier's store). Then `load` of each checkpoint into each kind, interleaved over
`--rounds` rounds; prints the median seconds (wall and this process's CPU) of each, and the
ratio to the same-kind load (in memory -> in memory: DCP reads the table back in place).
Expected: a swap reads the table whole once (like a load into another world size) and puts
every row into the store (RocksDB: about 2.5 M rows/s filled, docs/benchmarks.md), so a
small multiple of the same-kind load.

Numbers need a quiet machine (docs/benchmarks.md). `--quick`: 20,000 ids, 2 rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import platform
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_tiered.raw_checkpoint import empty

DIM = 64
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)


def build(kernel: str, ids: int, store: str) -> DistributedModelParallel:
    """The table planned `kernel`: capacity `ids` in memory, a cache of 1% as a tier."""
    capacity = ids if kernel == "fused" else max(64, ids // 100)
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="raw",
                num_embeddings=capacity,
                embedding_dim=DIM,
                feature_names=["f"],
                dynamic=DynamicTableConfig(),
            )
        ]
    )
    plan = construct_module_sharding_plan(
        ebc, {"raw": table_wise(rank=0, compute_kernel=kernel)}, world_size=1
    )
    plan["raw"] = dataclasses.replace(
        plan["raw"], key_value_params=KeyValueParams(ssd_storage_directory=store)
    )
    return DistributedModelParallel(
        ebc,
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=ShardingPlan(plan={"": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def fill(model: DistributedModelParallel, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """Put `ids` with `rows` (weight | momentum) into the model's table, either kind."""
    sharded = model.sharded_modules[""]
    part = sharded.dynamic_tables.table("raw")  # type: ignore[union-attr]
    cache = getattr(part, "cache", None)
    if cache is not None:
        empty(cache)
        cache.store.write(ids.numpy(), rows.numpy())
        cache.store.flush()
        return
    part.load_items(ids, torch.arange(ids.numel()))
    fused, offset = sharded._lookup_modules_of("raw")[0]  # type: ignore[operator]
    with torch.no_grad():
        sharded.embedding_bags["raw"].weight[: ids.numel()] = rows[:, :DIM]  # type: ignore[index]
        fused.optimizer_state()["momentum1"][offset : offset + ids.numel()] = rows[:, DIM]


def timed(fn: object) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def run(count: int, rounds: int, root: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29573")
    dist.init_process_group("gloo", rank=0, world_size=1)
    g = torch.Generator().manual_seed(0)
    ids = torch.unique(torch.randint(-(2**62), 2**62, (count,), generator=g))
    rows = torch.rand(ids.numel(), DIM + 1, generator=g)
    tier = (
        "ssd_virtual_table"
        if importlib.util.find_spec("shardrec_kvstore")
        else "dram_virtual_table"
    )
    kinds = {"memory": "fused", "tier": tier}
    for name, kernel in kinds.items():
        model = build(kernel, count, os.path.join(root, f"save-{name}"))
        fill(model, ids, rows)
        save(os.path.join(root, name), model, {"fused": model.fused_optimizer})
    targets = {n: build(k, count, os.path.join(root, f"load-{n}")) for n, k in kinds.items()}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for source in kinds:
            for target, model in targets.items():
                path = os.path.join(root, source)
                times.setdefault((source, target), []).append(
                    timed(lambda: load(path, model, {"fused": model.fused_optimizer}))  # noqa: B023
                )
    mib = ids.numel() * (DIM + 1) * 4 / (1 << 20)
    print(
        f"machine: {platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"table: {ids.numel()} ids x {DIM} float32 + rowwise Adagrad = {mib:.0f} MiB; "
        f"tier: {tier}, cache 1%; {rounds} rounds"
    )
    base = statistics.median(w for w, _ in times[("memory", "memory")])
    for (source, target), got in times.items():
        wall = statistics.median(w for w, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(
            f"{source:>6} -> {target:<6}: wall {wall:.2f} s, cpu {cpu:.2f} s, "
            f"{wall / base:.2f}x memory -> memory"
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 ids, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.ids, args.rounds = 20_000, 2
    with tempfile.TemporaryDirectory(prefix="raw-swap-") as root:
        run(args.ids, args.rounds, root)


if __name__ == "__main__":
    main()
