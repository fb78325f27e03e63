"""Beyond RAM (issue 29): train tables larger than this machine's memory, tiered on disk.

    tables     `--tables` tables of dim `--dim` whose rows and rowwise-Adagrad state total
               `--table-gb` GB (default 30 GB on a 24 GB machine), in flat-file stores on disk
    plan       the planner (`EmbeddingShardingPlanner(auto_tier=True)`, one rank whose memory
               is `--memory-gib`, its disk the free space of the store's file system) places
               every table tiered (`key_value`) and sizes each cache; the run uses its
               load factor
    training   `--steps` steps of Zipf(1.05) ids spread over all rows (hot rows scattered by a
               fixed permutation), a dense linear head and a logistic loss, prefetching batch
               i+1 on a background thread during batch i's backward
    reference  the same steps in memory, on a smaller table: only the rows the ids touch
               (the union over all steps), renumbered, with the same initial values; rows are
               independent under a row-wise optimizer, so the losses must agree step by step

Prints the table bytes, the plan's tier line, initialization time, median step time, the peak
RSS of the tiered run (`resource.getrusage`, before the reference is built), hit rates, and the
largest loss difference. The store directory is removed at the end (`--keep-store` keeps it).
Initial values are a function of (table, row, column), so the reference can build its rows
without the big table. `--quick`: a tiny run in seconds (what the smoke test runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import resource
import shutil
import time

import numpy as np
import torch
from torch import Tensor

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    EmbeddingShardingPlanner,
    EmbeddingTableSharder,
    ParameterConstraints,
    Topology,
)
from shardrec_planner.cache_stats import SampledCacheStatistics
from shardrec_tiered import TieredFusedEmbeddingBag, TieredOptions

GiB = 1024**3
INIT_SCALE = 0.01


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    tables: int
    rows: int
    dim: int
    batch: int
    pooling: int
    steps: int
    store_dir: str
    memory_bytes: int
    seed: int = 0
    learning_rate: float = 0.05
    dense_learning_rate: float = 0.05

    @property
    def optimizer(self) -> FusedOptimSpec:
        return FusedOptimSpec(
            optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=self.learning_rate
        )

    @property
    def row_bytes(self) -> int:
        """A row and its rowwise Adagrad state, float32."""
        return (self.dim + 1) * 4

    @property
    def table_bytes(self) -> int:
        return self.tables * self.rows * self.row_bytes


def init_rows(table: int, rows: Tensor, dim: int, out: Tensor | None = None) -> Tensor:
    """The initial `(len(rows), dim)` values of `rows` of `table`, in [-INIT_SCALE, INIT_SCALE)
    (written into `out` when given): a per-row 32-bit hash `u` in [0, 1), then
    `frac(u + j * golden ratio)` per column j. Only exactly rounded float32 operations, so a
    row's values do not depend on which rows are computed with it; in place, cheap enough to
    fill 30 GB."""
    mask = 0xFFFFFFFF
    x = (rows.long() ^ (table * 0x9E3779B1)) & mask
    for _ in range(2):
        x = ((x >> 16) ^ x) * 0x45D9F3B & mask
    x = (x >> 16) ^ x
    u = (x >> 8).float() / 2**24  # 24 bits: exact in float32
    golden = (torch.arange(dim, dtype=torch.float64) * 0.6180339887498949 % 1.0).float()
    v = torch.empty(len(rows), dim) if out is None else out
    torch.add(u[:, None], golden, out=v)
    return v.frac_().mul_(2 * INIT_SCALE).sub_(INIT_SCALE)


class RowInit:
    """`init_fn` of one tiered table: the store is initialized chunk by chunk in row order, so
    the rows of each call follow the previous call's."""

    def __init__(self, table: int, dim: int) -> None:
        self.table, self.dim, self.next_row = table, dim, 0

    def __call__(self, weight: Tensor) -> None:
        n = weight.shape[0]
        init_rows(self.table, torch.arange(self.next_row, self.next_row + n), self.dim, weight)
        self.next_row += n


def make_batches(cfg: Config) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step: the row ids `(tables, batch * pooling)` and the labels `(batch,)`."""
    rng = np.random.default_rng(cfg.seed)
    out = []
    for _ in range(cfg.steps):
        ranks = rng.zipf(1.05, (cfg.tables, cfg.batch * cfg.pooling)) % cfg.rows
        ids = (ranks * 2654435761) % cfg.rows  # hot rows scattered over the table
        labels = rng.integers(0, 2, cfg.batch).astype(np.float32)
        out.append((ids.astype(np.int64), labels))
    return out


def _step_inputs(cfg: Config, ids: np.ndarray, rows: list[int]) -> tuple[Tensor, Tensor]:
    """Group rows (table t's rows follow tables < t) and bag offsets, table-major bags."""
    base = np.cumsum([0, *rows[:-1]])[:, None]
    flat = torch.from_numpy((ids + base).reshape(-1))
    offsets = torch.arange(0, flat.numel() + 1, cfg.pooling, dtype=torch.int64)
    return flat, offsets


def _dense(cfg: Config) -> torch.nn.Linear:
    torch.manual_seed(cfg.seed)
    return torch.nn.Linear(cfg.tables * cfg.dim, 1)


def _train(
    cfg: Config,
    module: torch.nn.Module,
    inputs: list[tuple[Tensor, Tensor, Tensor]],
    prefetch: bool,
) -> tuple[list[float], list[float]]:
    """Losses and seconds per step."""
    head = _dense(cfg)
    opt = torch.optim.SGD(head.parameters(), lr=cfg.dense_learning_rate)
    losses, times = [], []
    for i, (ids, offsets, labels) in enumerate(inputs):
        start = time.perf_counter()
        pooled = module(ids, offsets)  # (tables * batch, dim), table-major
        if prefetch and i + 1 < len(inputs):
            module.prefetch(inputs[i + 1][0], background=True)  # type: ignore[operator]
        x = pooled.view(cfg.tables, cfg.batch, cfg.dim).transpose(0, 1).reshape(cfg.batch, -1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(x).squeeze(1), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    return losses, times


def plan_load_factors(cfg: Config, batches: list) -> tuple[dict[str, float], str]:
    """The planner's cache size per table on one rank of `cfg.memory_bytes`, its hit rates
    estimated from the run's own ids (`SampledCacheStatistics`), and the report's disk tier
    section."""
    ebc = EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name=f"t{t}",
                num_embeddings=cfg.rows,
                embedding_dim=cfg.dim,
                feature_names=[f"f{t}"],
            )
            for t in range(cfg.tables)
        ],
        device="meta",
    )
    os.makedirs(cfg.store_dir, exist_ok=True)
    topo = Topology(
        world_size=1,
        compute_device="cpu",
        ddr_cap=cfg.memory_bytes,
        ssd_cap=shutil.disk_usage(cfg.store_dir).free,
    )
    sharder = EmbeddingTableSharder(
        EmbeddingBagCollection, fused_params={"optimizer": "exact_row_wise_adagrad"}
    )
    constraints = {
        f"t{t}": ParameterConstraints(
            cache_params=CacheParams(
                stats=SampledCacheStatistics(
                    np.concatenate([ids[t] for ids, _ in batches]),
                    num_rows=cfg.rows,
                    ids_per_batch=cfg.batch * cfg.pooling,
                )
            )
        )
        for t in range(cfg.tables)
    }
    planner = EmbeddingShardingPlanner(
        topo, batch_size=cfg.batch, constraints=constraints, auto_tier=True, stats=[]
    )
    plan = planner.plan(ebc, [sharder])
    factors = {}
    for name, ps in plan.plan[""].items():
        if ps.compute_kernel.value != "key_value" or ps.cache_params is None:
            raise SystemExit(f"the planner kept table {name} in memory: {ps}")
        assert ps.cache_params.load_factor is not None  # set by the planner
        factors[name] = ps.cache_params.load_factor
    report = plan.report()
    tier = report[report.index("disk tier") :].split("\n\n")[0]
    return factors, tier


def run_tiered(cfg: Config, batches: list, load_factors: dict[str, float]) -> dict[str, object]:
    rows = [cfg.rows] * cfg.tables
    specs = [
        FusedTableSpec(name=f"t{t}", num_rows=cfg.rows, dim=cfg.dim, init_fn=RowInit(t, cfg.dim))
        for t in range(cfg.tables)
    ]
    start = time.perf_counter()
    module = TieredFusedEmbeddingBag(
        specs,
        cfg.optimizer,
        {n: TieredOptions(store_dir=cfg.store_dir, load_factor=f) for n, f in load_factors.items()},
    )
    init_s = time.perf_counter() - start
    for s in specs:
        assert isinstance(s.init_fn, RowInit) and s.init_fn.next_row == cfg.rows
    inputs = [(*_step_inputs(cfg, ids, rows), torch.from_numpy(y)) for ids, y in batches]
    module.prefetch(inputs[0][0])
    losses, times = _train(cfg, module, inputs, prefetch=True)
    stats = module.stats()
    module.flush()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hits = sum(int(s["hits"]) for s in stats.values())
    misses = sum(int(s["misses"]) for s in stats.values())
    first = next(iter(stats.values()))
    return {
        "losses": losses,
        "times": times,
        "init_s": init_s,
        "peak_rss": peak,
        "cache_rows": sum(c.slots for c in module.caches),
        "hit_rate": hits / max(1, hits + misses),
        "bytes_read": sum(int(s["bytes_read"]) for s in stats.values()),
        "bytes_written": sum(int(s["bytes_written"]) for s in stats.values()),
        "exposed": float(first["exposed_seconds"]) / max(1e-9, float(first["prefetch_seconds"])),
    }


def run_reference(cfg: Config, batches: list) -> tuple[list[float], int]:
    """The same steps in memory over only the touched rows, renumbered. Returns the losses and
    the reference's rows."""
    touched = [np.unique(np.concatenate([ids[t] for ids, _ in batches])) for t in range(cfg.tables)]
    specs = [
        FusedTableSpec(
            name=f"t{t}",
            num_rows=len(u),
            dim=cfg.dim,
            weight=init_rows(t, torch.from_numpy(u), cfg.dim),
        )
        for t, u in enumerate(touched)
    ]
    module = BatchedFusedEmbeddingBag(specs, cfg.optimizer)
    rows = [len(u) for u in touched]
    inputs = []
    for ids, y in batches:
        local = np.stack([np.searchsorted(touched[t], ids[t]) for t in range(cfg.tables)])
        inputs.append((*_step_inputs(cfg, local, rows), torch.from_numpy(y)))
    losses, _ = _train(cfg, module, inputs, prefetch=False)
    return losses, sum(rows)


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--table-gb", type=float, default=30.0, help="rows + optimizer state, GB")
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--pooling", type=int, default=4)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--memory-gib", type=float, default=6.0, help="the plan's memory per rank")
    p.add_argument("--store-dir", default=os.path.join(os.getcwd(), "beyond-ram-store"))
    p.add_argument("--keep-store", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny shapes (the smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.table_gb, args.tables, args.batch, args.pooling, args.steps = 0.01, 2, 64, 2, 5
        args.memory_gib = 0.004
    row_bytes = (args.dim + 1) * 4
    cfg = Config(
        tables=args.tables,
        rows=int(args.table_gb * 1e9) // (args.tables * row_bytes),
        dim=args.dim,
        batch=args.batch,
        pooling=args.pooling,
        steps=args.steps,
        store_dir=args.store_dir,
        memory_bytes=int(args.memory_gib * GiB),
    )
    os.makedirs(cfg.store_dir, exist_ok=True)
    free = shutil.disk_usage(cfg.store_dir).free
    if free < cfg.table_bytes * 1.1:
        raise SystemExit(
            f"{cfg.store_dir}: {free / 1e9:.1f} GB free, the stores need "
            f"{cfg.table_bytes / 1e9:.1f} GB (+10%); pass --store-dir on a larger disk or a "
            "smaller --table-gb"
        )
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpus, RAM {ram / GiB:.1f} GiB, "
        f"disk free {free / 1e9:.1f} GB, torch {torch.__version__}"
    )
    print(
        f"tables: {cfg.tables} x {cfg.rows:,} rows x dim {cfg.dim}, rowwise Adagrad: "
        f"{cfg.table_bytes / 1e9:.2f} GB ({cfg.table_bytes / ram:.2f}x RAM); batch {cfg.batch}, "
        f"{cfg.pooling} ids per bag, {cfg.steps} steps, Zipf(1.05) ids"
    )
    try:
        batches = make_batches(cfg)
        load_factors, tier = plan_load_factors(cfg, batches)
        print(tier)
        result = run_tiered(cfg, batches, load_factors)
    finally:
        if not args.keep_store:
            shutil.rmtree(cfg.store_dir, ignore_errors=True)
    ref_losses, ref_rows = run_reference(cfg, batches)
    losses = result["losses"]
    assert isinstance(losses, list)
    diff = max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True))
    times = result["times"]
    assert isinstance(times, list)
    result.update(
        table_bytes=cfg.table_bytes,
        ref_losses=ref_losses,
        ref_rows=ref_rows,
        max_loss_diff=diff,
        load_factors=load_factors,
    )
    median = 1e3 * float(np.median(times[1:] or times))
    read, written = int(result["bytes_read"]) / 1e6, int(result["bytes_written"]) / 1e6  # type: ignore[call-overload]
    print(
        f"store init {result['init_s']:.1f} s; cache {result['cache_rows']:,} rows (load factors "
        f"{sorted(set(load_factors.values()))}); median step {median:.1f} ms (first "
        f"{1e3 * times[0]:.1f} ms); hit rate {result['hit_rate']:.1%}; read {read:.1f} MB, "
        f"written {written:.1f} MB (initialization included); prefetch exposed "
        f"{float(result['exposed']):.0%}"  # type: ignore[arg-type]
    )
    print(
        f"peak RSS of the tiered run: {int(result['peak_rss']) / GiB:.2f} GiB; tables "  # type: ignore[call-overload]
        f"{cfg.table_bytes / GiB:.2f} GiB"
    )
    print(
        f"loss, tiered vs in-memory reference ({ref_rows:,} touched rows): first "
        f"{losses[0]:.6f} / {ref_losses[0]:.6f}, last {losses[-1]:.6f} / {ref_losses[-1]:.6f}, "
        f"max |diff| over {len(losses)} steps {diff:.2e}"
    )
    return result


if __name__ == "__main__":
    main()
