"""Planner benchmark: planning time and plan quality against TorchRec 1.8's planner.

Synthetic models: log-uniform rows in [1e3, 1e8], dims from {32, 64, 128, 256}, one feature per
table with a pooling factor uniform in [1, 30]; 80 GB devices, 8 ranks per host, batch 512 per
rank, 15% of memory reserved (TorchRec's default). Both planners see the same TorchRec
EmbeddingBagCollection on the meta device and the same pooling factors; both plans are scored
with shardrec's cost model (slowest rank's estimated step time) and compared with its lower bound.

    .venv/bin/python benchmarks/planner.py            # full run (TorchRec takes minutes)
    .venv/bin/python benchmarks/planner.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import platform
import statistics
import time
import warnings
from collections import Counter
from typing import Any

import numpy as np
import torch
from torch import nn

from shardrec_planner import (
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    EmbeddingTableSharder,
    EnumerableShardingSpec,
    ParameterConstraints,
    ParameterSharding,
    PlannerError,
    ShardingPlan,
    ShardMetadata,
    Topology,
)

GB = 10**9
HBM = 80 * GB
LOCAL = 8
BATCH = 512


def synthetic(seed: int, n: int) -> tuple[list[tuple[str, int, int]], list[float]]:
    rng = np.random.default_rng(seed)
    rows = (10 ** rng.uniform(3, 8, n)).astype(int)
    dims = rng.choice([32, 64, 128, 256], n)
    pfs = rng.uniform(1, 30, n)
    spec = [(f"t{i}", int(r), int(d)) for i, (r, d) in enumerate(zip(rows, dims, strict=True))]
    return spec, [float(p) for p in pfs]


def build_module(spec: list[tuple[str, int, int]]) -> tuple[nn.Module, type[nn.Module]]:
    """TorchRec's EBC on meta when importable (both planners plan the same object), else a stub."""
    try:
        import torchrec

        tables = [
            torchrec.EmbeddingBagConfig(
                name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"{n}_f"]
            )
            for n, r, d in spec
        ]
        ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
        return ebc, torchrec.EmbeddingBagCollection
    except ImportError:
        return _StubEBC(spec), _StubEBC


class _StubConfig:
    def __init__(self, name: str, feature_names: list[str]) -> None:
        self.name, self.feature_names = name, feature_names


class _StubEBC(nn.Module):
    def __init__(self, spec: list[tuple[str, int, int]]) -> None:
        super().__init__()
        self._configs = [_StubConfig(n, [f"{n}_f"]) for n, _, _ in spec]
        self.embedding_bags = nn.ModuleDict()
        for n, r, d in spec:
            bag = nn.Module()
            bag.weight = nn.Parameter(torch.empty(r, d, device="meta"))
            self.embedding_bags[n] = bag

    def embedding_bag_configs(self) -> list[_StubConfig]:
        return list(self._configs)


def ours(
    spec: list[tuple[str, int, int]], pfs: list[float], world: int
) -> tuple[EmbeddingShardingPlanner, nn.Module, EmbeddingTableSharder]:
    module, mtype = build_module(spec)
    cons = {
        n: ParameterConstraints(pooling_factors=[p]) for (n, _, _), p in zip(spec, pfs, strict=True)
    }
    topo = Topology(world_size=world, compute_device="cuda", hbm_cap=HBM, local_world_size=LOCAL)
    return EmbeddingShardingPlanner(topo, BATCH, cons), module, EmbeddingTableSharder(mtype)


def _torchrec_job(spec: list[tuple[str, int, int]], pfs: list[float], world: int, out: Any) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner as TRPlanner
    from torchrec.distributed.planner import Topology as TRTopology
    from torchrec.distributed.planner.types import ParameterConstraints as TRConstraints

    module, _ = build_module(spec)
    cons = {n: TRConstraints(pooling_factors=[p]) for (n, _, _), p in zip(spec, pfs, strict=True)}
    topo = TRTopology(world_size=world, compute_device="cuda", hbm_cap=HBM, local_world_size=LOCAL)
    start = time.perf_counter()
    try:
        plan = TRPlanner(topology=topo, batch_size=BATCH, constraints=cons).plan(
            module, [EmbeddingBagCollectionSharder()]
        )
    except Exception as err:  # report TorchRec's failure, do not crash the table
        out.put(("error", f"{type(err).__name__}: {str(err)[:200]}"))
        return
    seconds = time.perf_counter() - start
    tables = {}
    for path, module_plan in plan.plan.items():
        for name, ps in module_plan.items():
            shards = (
                None
                if ps.sharding_spec is None
                else [
                    (list(s.shard_offsets), list(s.shard_sizes), str(s.placement))
                    for s in ps.sharding_spec.shards
                ]
            )
            tables[(path, name)] = (
                ps.sharding_type,
                ps.compute_kernel,
                list(ps.ranks or []),
                shards,
            )
    out.put(("ok", (seconds, tables)))


def torchrec_plan(
    spec: list[tuple[str, int, int]], pfs: list[float], world: int, timeout_s: float
) -> tuple[str, Any]:
    """Run TorchRec's planner in a child process; ("ok", (seconds, tables)), ("error", msg) or
    ("timeout", timeout_s)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_torchrec_job, args=(spec, pfs, world, q))
    p.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not q.empty():
            result = q.get()
            p.join()
            return result
        if not p.is_alive() and q.empty():
            return ("error", f"child exited with {p.exitcode}")
        time.sleep(0.2)
    p.terminate()
    p.join()
    return ("timeout", timeout_s)


def to_our_plan(tables: dict[tuple[str, str], Any]) -> tuple[ShardingPlan, int]:
    """TorchRec's plan as ours; kernels we do not model (UVM caching) count as fused."""
    plan: dict[str, dict[str, ParameterSharding]] = {}
    other_kernels = 0
    for (path, name), (st, kernel, ranks, shards) in tables.items():
        try:
            k = EmbeddingComputeKernel(kernel)
        except ValueError:
            k, other_kernels = EmbeddingComputeKernel.FUSED, other_kernels + 1
        spec = (
            None
            if shards is None
            else EnumerableShardingSpec(
                shards=tuple(
                    ShardMetadata(shard_offsets=tuple(o), shard_sizes=tuple(s), placement=pl)
                    for o, s, pl in shards
                )
            )
        )
        plan.setdefault(path, {})[name] = ParameterSharding(
            sharding_type=st, compute_kernel=k, ranks=tuple(ranks), sharding_spec=spec
        )
    return ShardingPlan(plan=plan), other_kernels


def time_ours(
    spec: list[tuple[str, int, int]], pfs: list[float], world: int, repeats: int
) -> tuple[float, ShardingPlan]:
    times, plan = [], None
    for _ in range(repeats):
        planner, module, sharder = ours(spec, pfs, world)
        start = time.perf_counter()
        plan = planner.plan(module, [sharder])
        times.append(time.perf_counter() - start)
    assert plan is not None
    return statistics.median(times), plan


def types_of(plan: ShardingPlan) -> str:
    all_ps = [ps for m in plan.plan.values() for ps in m.values()]
    c = Counter(ps.sharding_type.value for ps in all_ps)
    uvm = sum("uvm" in ps.compute_kernel.value for ps in all_ps)
    short = {
        "table_wise": "TW",
        "row_wise": "RW",
        "column_wise": "CW",
        "data_parallel": "DP",
        "table_row_wise": "TWRW",
        "table_column_wise": "TWCW",
        "grid_shard": "GRID",
    }
    text = " ".join(f"{short[k]}:{v}" for k, v in sorted(c.items()))
    return text + (f" (uvm:{uvm})" if uvm else "")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument(
        "--torchrec-timeout", type=float, default=300.0, help="seconds per TorchRec plan"
    )
    parser.add_argument(
        "--torchrec-max-tables",
        type=int,
        default=1000,
        help="skip TorchRec on larger models (it takes far longer than the timeout there)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (median)")
    parser.add_argument("--chart", default="", help="write the first model's chart PNG here")
    args = parser.parse_args()

    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, python {platform.python_version()}"
    )
    print(f"torch {torch.__version__}", end="")
    try:
        import torchrec

        print(f", torchrec {torchrec.__version__ if hasattr(torchrec, '__version__') else '?'}")
        have_torchrec = True
    except ImportError:
        print(" (torchrec not importable: TorchRec columns skipped)")
        have_torchrec = False
    print(f"devices: {HBM // GB} GB, {LOCAL} ranks/host, batch {BATCH}/rank, 15% reserved\n")

    if args.quick:
        quality = [(100, 8, 0), (100, 8, 1)]
        scaling = [(250, 64), (500, 64), (1000, 64)]
        repeats = 1
    else:
        quality = (
            [(100, 8, s) for s in range(5)]
            + [(200, 16, s) for s in range(2)]
            + [
                (1000, 64, 0),
                (5000, 1024, 0),
            ]
        )
        scaling = [(625, 1024), (1250, 1024), (2500, 1024), (5000, 1024)]
        repeats = args.repeats

    print("quality and time (cost = slowest rank's estimated step time, shardrec cost model)")
    header = (
        f"{'tables':>6} {'ranks':>5} {'seed':>4} | {'ours s':>7} {'torchrec s':>10} "
        f"{'speedup':>7} | {'ours ms':>9} {'torchrec ms':>11} {'bound ms':>9} {'ours gap':>8} "
        f"{'tr gap':>7} | types (ours / torchrec)"
    )
    print(header)
    print("-" * len(header))
    for n, world, seed in quality:
        spec, pfs = synthetic(seed, n)
        try:
            t_ours, plan = time_ours(spec, pfs, world, repeats if n <= 1000 else 1)
        except PlannerError as err:
            print(f"{n:>6} {world:>5} {seed:>4} | ours: PlannerError {str(err)[:120]}")
            continue
        assert plan.stats is not None
        if args.chart and seed == 0 and n == quality[0][0]:
            from shardrec_planner import save_plan_chart

            print(f"  chart: {save_plan_chart(plan, args.chart)}")
        bound = plan.stats.lower_bound_s
        tr_s = tr_ms = tr_gap = speed = "-"
        tr_types = "-"
        if have_torchrec and n > args.torchrec_max_tables:
            tr_s, tr_types = (
                "skipped",
                f"more than --torchrec-max-tables={args.torchrec_max_tables}",
            )
        elif have_torchrec:
            status, payload = torchrec_plan(spec, pfs, world, args.torchrec_timeout)
            if status == "ok":
                seconds, tables = payload
                their_plan, uvm = to_our_plan(tables)
                planner, module, sharder = ours(spec, pfs, world)
                scored = planner.estimate(module, [sharder], their_plan).stats
                assert scored is not None
                tr_s = f"{seconds:.2f}"
                speed = f"{seconds / t_ours:.0f}x"
                tr_ms = f"{scored.max_cost_s * 1e3:.3f}"
                tr_gap = f"{100 * scored.gap_to_lower_bound:.1f}%"
                over = sum(r.memory_bytes > r.memory_cap_bytes for r in scored.ranks)
                tr_types = (
                    types_of(their_plan)
                    + (f" uvm:{uvm}" if uvm else "")
                    + (f" over-cap ranks:{over}" if over else "")
                )
                if scored.max_cost_s < plan.stats.max_cost_s * (1 - 1e-9):
                    tr_types += "  <-- TorchRec better"
            else:
                tr_s = status if status == "timeout" else "error"
                tr_types = str(payload)[:80]
        print(
            f"{n:>6} {world:>5} {seed:>4} | {t_ours:>7.3f} {tr_s:>10} {speed:>7} | "
            f"{plan.stats.max_cost_s * 1e3:>9.3f} {tr_ms:>11} {bound * 1e3:>9.3f} "
            f"{100 * plan.stats.gap_to_lower_bound:>7.1f}% {tr_gap:>7} | "
            f"{types_of(plan)} / {tr_types}"
        )

    print("\nscaling of our planning time (median of repeats)")
    print(f"{'tables':>6} {'ranks':>5} | {'seconds':>8} {'ms/table':>9} {'gap':>6}")
    for n, world in scaling:
        spec, pfs = synthetic(0, n)
        t, plan = time_ours(spec, pfs, world, repeats)
        assert plan.stats is not None
        print(
            f"{n:>6} {world:>5} | {t:>8.3f} {1e3 * t / n:>9.3f} "
            f"{100 * plan.stats.gap_to_lower_bound:>5.1f}%"
        )


if __name__ == "__main__":
    main()
