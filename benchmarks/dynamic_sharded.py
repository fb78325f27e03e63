"""Sharded raw-id tables: a training step on 2 gloo ranks, dynamic and MC-EBC vs static.

Run: ``.venv/bin/python benchmarks/dynamic_sharded.py`` (``--quick`` for a smoke run, < 60 s).
Two spawned ranks (shardrec_testing.RankPool, 1 intra-op thread each) wrap a model with
DistributedModelParallel and a fused EXACT_ROWWISE_ADAGRAD sharder and time one training step
(forward: input dist, id -> slot, lookup, output dist; backward with the fused update):

(a) dynamic tables (`DynamicTableConfig`, LRU): 8 tables x capacity 100k x dim 64, batch 2048
    per rank, 20 ids per bag, Zipf(1.05) raw ids, sharded row_wise (each rank owns the ids whose
    hash falls in its part, and that part of the capacity) and table_wise (tables alternate
    ranks). Tables are pre-filled to 50% occupancy by one training step over the pool's ids.
    Two id streams as in benchmarks/dynamic.py: "resident" (Zipf over the ids already in the
    table) and "stream" (Zipf over 2^40: most ids are new; every step admits and evicts).
(b) TorchRec-named `ManagedCollisionEmbeddingBagCollection` (MCH, DistanceLFU, eviction every
    forward, `input_hash_size` 2^40) sharded row_wise by its sharder
    (`shardrec.distributed.mc_embeddingbag`), same shapes, raw ids over 2^40.

Beside each: the reference, a static table of the same size on pre-mapped ids (the Zipf ranks
through a fixed permutation of the rows, so that row_wise blocks share the popular rows as the
hashed dynamic ids do; the hash modulo the capacity in the stream regime) with the same
sharding type, and the ratio. Both models live in the same rank processes and their steps
alternate, so load bursts hit them alike; rank 0's median wall and process-CPU ms.

TorchRec 1.8 has no CPU sharding for its MC modules: the script asks TorchRec's MC-EBC sharder
for its sharding types (``--torchrec-python``: a Python with TorchRec; default this one) and
prints what it says (1.8: none on "cpu", row_wise on "cuda"). Reports only; asserts nothing.
Results: docs/bench/dynamic.md ("Sharded").
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from _dynamic_tables import table_configs  # benchmarks/_dynamic_tables.py
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, dynamic_table_stats
from shardrec_embedding.dynamic.hashing import mix64
from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    MCHManagedCollisionModule,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    ParameterShardingGenerator,
    ShardingPlan,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.mc import ManagedCollisionEmbeddingBagCollectionSharder
from shardrec_testing import RankContext, RankPool

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)
HASH_BITS = 40
OCCUPANCY = 0.5
CASES = [
    ("dynamic", "row_wise", "resident"),
    ("dynamic", "row_wise", "stream"),
    ("dynamic", "table_wise", "resident"),
    ("dynamic", "table_wise", "stream"),
    ("mc-ebc", "row_wise", "stream"),
]


class Sparse(nn.Module):
    """The sharded part of a model: one collection; its step's loss is the pooled sum."""

    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.ebc = ebc

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        out = self.ebc(kjt)
        pooled = out[0] if isinstance(out, tuple) else out  # MC-EBC: (pooled, remapped)
        total: torch.Tensor = pooled.values().sum()
        return total


def _generator(kind: str, i: int) -> ParameterShardingGenerator:
    return row_wise() if kind == "row_wise" else table_wise(rank=i % 2)


def _wrap(
    ctx: RankContext, module: nn.Module, ebc: EmbeddingBagCollection, kind: str, mc: bool
) -> nn.Module:
    names = [c.name for c in ebc.embedding_bag_configs()]
    plan = construct_module_sharding_plan(
        ebc, {n: _generator(kind, i) for i, n in enumerate(names)}, world_size=ctx.world_size
    )
    sharder: object
    if mc:
        sharder = ManagedCollisionEmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    else:
        sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    return DistributedModelParallel(
        module,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"ebc": plan}),
        sharders=[sharder],
    )


def _mc_ebc(tables: int, capacity: int, dim: int) -> ManagedCollisionEmbeddingBagCollection:
    configs = table_configs(tables, capacity, dim, dynamic=False)
    modules = {
        c.name: MCHManagedCollisionModule(
            zch_size=capacity,
            device=torch.device("cpu"),
            eviction_policy=DistanceLFU_EvictionPolicy(),
            eviction_interval=1,
            input_hash_size=1 << HASH_BITS,
        )
        for c in configs
    }
    return ManagedCollisionEmbeddingBagCollection(
        EmbeddingBagCollection(configs),
        ManagedCollisionCollection(modules, configs),
        return_remapped_features=False,
    )


def _raw(ranks: torch.Tensor, mc: bool) -> torch.Tensor:
    """The raw id of each popularity rank: a hash over int64 (MCH: over [0, 2^40))."""
    raw = mix64(ranks + 1)
    return raw & ((1 << HASH_BITS) - 1) if mc else raw


def _batches(
    rank: int, count: int, tables: int, batch: int, bag: int, capacity: int, pool: int, mc: bool
) -> list[tuple[KeyedJaggedTensor, KeyedJaggedTensor]]:
    """(raw-id KJT, pre-mapped KJT) pairs of Zipf(1.05) ranks below `pool` for `rank`. The
    pre-mapped id of popularity rank r is `spread[r]` (resident: a fixed permutation of the
    rows, so a row_wise static table's popular rows fall on both ranks' blocks, as a dynamic
    table's hashed ids do) or the raw id's hash modulo the capacity (stream)."""
    rng = np.random.default_rng(1000 + rank)
    spread = torch.randperm(capacity, generator=torch.Generator().manual_seed(0))
    keys = [f"f{i}" for i in range(tables)]
    lengths = torch.full((tables * batch,), bag, dtype=torch.int64)
    out = []
    for _ in range(count):
        ranks = torch.from_numpy(
            ((rng.zipf(1.05, tables * batch * bag) - 1) % pool).astype(np.int64)
        )
        raw = _raw(ranks, mc)
        mapped = spread[ranks] if pool <= capacity else (raw & ((1 << 62) - 1)) % capacity
        out.append(
            (
                KeyedJaggedTensor(keys, raw, lengths=lengths, stride=batch),
                KeyedJaggedTensor(keys, mapped, lengths=lengths, stride=batch),
            )
        )
    return out


def _prefill(ctx: RankContext, model: nn.Module, tables: int, filled: int, mc: bool) -> None:
    """One training step whose bags hold every pool id once (this rank: ids r, r + 2, ...)."""
    ids = _raw(torch.arange(ctx.rank, filled, ctx.world_size), mc)
    keys = [f"f{i}" for i in range(tables)]
    kjt = KeyedJaggedTensor(
        keys,
        ids.repeat(tables),
        lengths=torch.full((tables,), ids.numel(), dtype=torch.int64),
        stride=1,
    )
    model(kjt).backward()


_STATE: dict[str, object] = {}


def setup_rank(
    ctx: RankContext,
    model_kind: str,
    kind: str,
    regime: str,
    shape: tuple[int, int, int, int, int],
) -> str:
    """Build the case's model and its static reference in this rank, pre-fill, warm up."""
    torch.set_num_threads(1)
    _STATE.clear()
    tables, capacity, dim, batch, bag = shape
    mc = model_kind == "mc-ebc"
    filled = int(capacity * OCCUPANCY)
    ebc: nn.Module
    if mc:
        mc_ebc = _mc_ebc(tables, capacity, dim)
        ebc, inner = mc_ebc, mc_ebc._embedding_module
        assert isinstance(inner, EmbeddingBagCollection)
    else:
        ebc = inner = EmbeddingBagCollection(table_configs(tables, capacity, dim, dynamic=True))
    ours = _wrap(ctx, Sparse(ebc), inner, kind, mc)
    static_ebc = EmbeddingBagCollection(table_configs(tables, capacity, dim, dynamic=False))
    static = _wrap(ctx, Sparse(static_ebc), static_ebc, kind, mc=False)
    _prefill(ctx, ours, tables, filled, mc)
    pool = filled if regime == "resident" else 1 << HASH_BITS
    pairs = _batches(ctx.rank, 4, tables, batch, bag, capacity, pool, mc)
    _STATE.update(ours=ours, static=static, pairs=pairs, step=0)
    for _ in range(2):
        step_once(ctx, "ours")
        step_once(ctx, "static")
    stats = dynamic_table_stats(ours)
    _STATE["stats0"] = stats
    return ""


def step_once(ctx: RankContext, side: str) -> None:
    model = _STATE[side]
    pairs = _STATE["pairs"]
    assert isinstance(model, nn.Module) and isinstance(pairs, list)
    i = int(_STATE["step"]) // 2  # type: ignore[call-overload]
    _STATE["step"] = int(_STATE["step"]) + 1  # type: ignore[call-overload]
    kjt = pairs[i % len(pairs)][0 if side == "ours" else 1]
    model(kjt).backward()


def timed_step(ctx: RankContext, side: str) -> tuple[float, float]:
    dist.barrier(group=ctx.pg)
    start, cpu = time.perf_counter(), time.process_time()
    step_once(ctx, side)
    return (time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3


def occupancy(ctx: RankContext) -> tuple[float, float, int]:
    """(occupancy at the first timed step, now, admissions per step) of table t0, summed over
    its shards (dynamic tables only; MC-EBC: -1)."""
    before = _STATE.get("stats0")
    model = _STATE["ours"]
    assert isinstance(model, nn.Module)
    now = dynamic_table_stats(model)
    if not now or not isinstance(before, dict):
        return -1.0, -1.0, -1
    key = next(k for k in now if k.endswith("t0"))
    summed = torch.tensor(
        [
            before[key]["occupancy"],
            now[key]["occupancy"],
            now[key]["admissions"] - before[key]["admissions"],
        ],
        dtype=torch.float64,
    )
    steps = torch.tensor([now[key]["steps"] - before[key]["steps"]], dtype=torch.float64)
    dist.all_reduce(summed, group=ctx.pg)
    dist.all_reduce(steps, op=dist.ReduceOp.MAX, group=ctx.pg)  # ranks without t0 count none
    b, n, adm = summed.tolist()
    return b, n, int(adm / max(1.0, steps.item()))


def drop_rank(ctx: RankContext) -> None:
    _STATE.clear()


def bench(pool: RankPool, shape: tuple[int, int, int, int, int], repeats: int) -> None:
    capacity = shape[1]
    print(
        "| model | sharding | ids | occupancy t0 (start -> end) | new ids / table / step "
        "| ours ms (wall / cpu) | static ms (wall / cpu) | ratio (wall / cpu) |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for model_kind, kind, regime in CASES:
        pool.run(setup_rank, model_kind, kind, regime, shape)
        got: dict[str, list[tuple[float, float]]] = {"ours": [], "static": []}
        for _ in range(repeats):
            for side in ("ours", "static"):
                got[side].append(pool.run(timed_step, side)[0])
        b, n, new = pool.run(occupancy)[0]
        pool.run(drop_rank)
        ow, oc = (statistics.median(x[i] for x in got["ours"]) for i in range(2))
        sw, sc = (statistics.median(x[i] for x in got["static"]) for i in range(2))
        occ = "-" if b < 0 else f"{b / capacity:.0%} -> {n / capacity:.0%}"
        news = "-" if new < 0 else str(new)
        print(
            f"| {model_kind} | {kind} | {regime} | {occ} | {news} | {ow:.1f} / {oc:.1f} "
            f"| {sw:.1f} / {sc:.1f} | {ow / sw:.2f} / {oc / sc:.2f} |",
            flush=True,
        )


TORCHREC_CHECK = """
from torchrec.distributed.mc_embeddingbag import ManagedCollisionEmbeddingBagCollectionSharder as S
for device in ("cpu", "cuda"):
    print(f"TorchRec 1.8 ManagedCollisionEmbeddingBagCollectionSharder().sharding_types("
          f"{device!r}) -> {S().sharding_types(device)}")
"""


def torchrec_check(python: str) -> None:
    """Ask TorchRec's MC-EBC sharder (in `python`, a Python with TorchRec) for its sharding
    types on CPU and CUDA, and print what it says."""
    try:
        done = subprocess.run(
            [python, "-c", TORCHREC_CHECK], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"TorchRec check not run ({python}): {exc}")
        return
    lines = (done.stdout or done.stderr).strip().splitlines()
    if done.returncode:
        print(f"TorchRec unavailable in {python}: {lines[-1] if lines else done.returncode}")
    else:
        print("\n".join(lines))


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--batch", type=int, default=2048, help="batch per rank")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per case")
    parser.add_argument(
        "--torchrec-python",
        default=sys.executable,
        help="a Python with TorchRec 1.8, asked for its MC sharding types (default: this one)",
    )
    args = parser.parse_args()
    if args.quick:
        shape, repeats = (2, 4_000, 16, 64, 5), 2
    else:
        shape, repeats = (8, 100_000, 64, args.batch, 20), 7
    if args.repeats is not None:
        repeats = args.repeats
    tables, capacity, dim, batch, bag = shape
    print(f"machine: {platform.platform()}, 1 intra-op thread per rank, ", end="")
    print(f"{os.cpu_count()} cpus, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(
        f"shapes: {tables} tables x capacity {capacity} x dim {dim}, batch {batch} per rank, "
        f"{bag} ids per bag, Zipf(1.05), 2 gloo ranks, DMP + fused {SPEC.optimizer.name}, "
        f"pre-filled to {OCCUPANCY:.0%}, median of {repeats} steps (rank 0)"
    )
    print("TorchRec 1.8 has no CPU sharding for its MC modules; asked:")
    torchrec_check(args.torchrec_python)
    load_before = _loadavg()
    pool = RankPool(2, timeout_s=1800)
    try:
        pool.start()
        bench(pool, shape, repeats)
    finally:
        pool.close()
    print(f"load average (1/5/15 min): {load_before} before -> {_loadavg()} after")


if __name__ == "__main__":
    main()
