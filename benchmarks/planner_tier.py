"""Planner benchmark for the disk tier: planning time and plan quality with `auto_tier=True` on
a cpu model that does not fit the ranks' memory.

Synthetic model: log-uniform rows in [1e5, 5e7], dims from {64, 128}, one feature per table
with a pooling factor uniform in [1, 20], rowwise Adagrad; cpu ranks whose memory holds
`--fit` of the tables' rows and state (default a half: the planner must tier about half of
it), a disk of `--ssd-gib` each (default 2 TiB), batch 512 per rank. Prints the machine, the
shapes, the process CPU time of `plan` (median of `--rounds`), the slowest rank's estimated
step time and the lower bound, and how many tables went to the tier, per sharding type. Run it
against two checkouts (e.g. SHARDREC_WT=/work/main and a branch) alternately to compare.

    python benchmarks/planner_tier.py --tables 60 --world 4 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections import Counter

import numpy as np

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import (
    EmbeddingShardingPlanner,
    EmbeddingTableSharder,
    ParameterConstraints,
    PlannerError,
    Topology,
)


def model(n: int, seed: int) -> tuple[EmbeddingBagCollection, dict[str, float], float]:
    """The tables (meta device), their pooling factors, and their rows + state bytes."""
    rng = np.random.default_rng(seed)
    rows = (10 ** rng.uniform(5, np.log10(5e7), n)).astype(int)
    dims = rng.choice([64, 128], n)
    configs = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=int(r), embedding_dim=int(d), feature_names=[f"f{i}"]
        )
        for i, (r, d) in enumerate(zip(rows, dims, strict=True))
    ]
    pf = {f"t{i}": float(p) for i, p in enumerate(rng.uniform(1, 20, n))}
    total = float(sum(int(r) * (int(d) + 1) * 4 for r, d in zip(rows, dims, strict=True)))
    return EmbeddingBagCollection(configs, device="meta"), pf, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", type=int, default=60)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--fit", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ssd-gib", type=float, default=2048.0, help="disk per rank")
    args = ap.parse_args()
    ebc, pf, total = model(args.tables, args.seed)
    ddr = int(total * args.fit / args.world / 0.85)
    topo = Topology(
        world_size=args.world,
        local_world_size=args.world,
        compute_device="cpu",
        ddr_cap=ddr,
        ssd_cap=int(args.ssd_gib * 1024**3),
    )
    sharder = EmbeddingTableSharder(type(ebc), fused_params={"optimizer": "rowwise_adagrad"})
    cons = {n: ParameterConstraints(pooling_factors=[p]) for n, p in pf.items()}
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus")
    print(
        f"shapes: {args.tables} tables, {total / 1024**3:.1f} GiB of rows + state, "
        f"{args.world} cpu ranks of {ddr / 1024**3:.2f} GiB memory and {args.ssd_gib:g} GiB "
        "disk, auto_tier=True"
    )
    seconds: list[float] = []
    for _ in range(args.rounds):
        planner = EmbeddingShardingPlanner(
            topo, batch_size=512, constraints=cons, stats=[], auto_tier=True
        )
        start = time.process_time()
        try:
            plan = planner.plan(ebc, [sharder])
        except PlannerError as err:
            print(f"PlannerError: {str(err).splitlines()[0]}")
            return
        seconds.append(time.process_time() - start)
    stats = plan.stats
    assert stats is not None
    tiered = Counter(t.sharding_type for t in stats.tables if t.tier is not None)
    placed = Counter(t.sharding_type for t in stats.tables if t.tier is None)
    print(f"plan CPU seconds: median {statistics.median(seconds):.3f} of {seconds}")
    print(
        f"slowest rank {stats.max_cost_s * 1e3:.3f} ms, lower bound "
        f"{stats.lower_bound_s * 1e3:.3f} ms"
    )
    print(f"tiered tables by sharding type: {dict(sorted(tiered.items()))}")
    print(f"in-memory tables by sharding type: {dict(sorted(placed.items()))}")


if __name__ == "__main__":
    main()
