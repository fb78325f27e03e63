"""Sharded EmbeddingBagCollection training step vs TorchRec 1.8, on 2 gloo ranks (CPU).

Run: ``.venv/bin/python benchmarks/sharded.py`` (``--quick`` for a smoke run). Two spawned ranks
(shardrec_testing.RankPool) each shard 26 tables x 100k rows x dim 64 with one sharding type and
time a training step: forward (input dist, lookup, output dist, wait) + backward with the fused
row-wise Adagrad (data_parallel: dense gradients, all-reduced; TorchRec wraps those in DDP). Batch
1024 per rank, ~10 ids per bag. Median over repeats, ours and TorchRec's timed in alternation,
as seen by rank 0. Ours and TorchRec run in separate rank processes, so that the allocator
setting that importing shardrec_sharding applies (process-wide) does not reach TorchRec's.
TorchRec runs only table_wise, column_wise and data_parallel on CPU; row_wise and
table_row_wise are reported on their own. Also reports rank 0's minor page faults per step
(`getrusage` ru_minflt, median): fresh memory touched by a step. `--types` picks sharding types,
`--no-torchrec` times ours alone (A/B runs of two checkouts: `SHARDREC_WT=<checkout>`),
`--assembly` times the output assembly alone (old column gather vs block copies).
`--profile` prints rank 0's step phase by phase per type, ours only (thread CPU / wall ms).
TorchRec is timed only on the same shards as ours (ranks, offsets and sizes compared per table).
Then, per sharding type with a traffic model (`traffic`), the bytes rank 0 sends and receives
per step, gloo's wall and CPU time for exactly those bytes (`gloo_ms`, in the same ranks), and
row_wise / table_row_wise's extra over table_wise against that allowance (issue 28: "no slower
than table_wise by more than their extra traffic"): gloo's median time per exchange over two
probes (before and after the steps, every type's exchanges timed once per round), summed per
type; the median of each round's paired difference is printed beside it. Reports only; asserts
nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    ParameterShardingGenerator,
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection
from shardrec_testing import RankContext, RankPool

MEAN_IDS, DIM = 10, 64
TYPES = ["table_wise", "column_wise", "data_parallel", "row_wise", "table_row_wise"]
TORCHREC_TYPES = {"table_wise", "column_wise", "data_parallel"}
FUSED = {"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.01}


def _ours_plan(kind: str, i: int) -> ParameterShardingGenerator:
    if kind == "table_wise":
        return table_wise(rank=i % 2)
    if kind == "column_wise":
        return column_wise(ranks=[0, 1])
    if kind == "data_parallel":
        return data_parallel()
    if kind == "row_wise":
        return row_wise()
    return table_row_wise(host_index=0)


def _batch(rank: int, tables: int, batch: int) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    lengths = torch.randint(0, 2 * MEAN_IDS + 1, (tables * batch,), generator=g)
    values = torch.randint(0, 1 << 62, (int(lengths.sum()),), generator=g)
    return [f"f{t}" for t in range(tables)], values, lengths


def _ours(ctx: RankContext, kind: str, tables: int, rows: int, batch: int) -> Callable[[], object]:
    configs = [
        EmbeddingBagConfig(
            name=f"t{t}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f"f{t}"]
        )
        for t in range(tables)
    ]
    ebc = EmbeddingBagCollection(configs, device="meta")
    plan = construct_module_sharding_plan(
        ebc, {f"t{t}": _ours_plan(kind, t) for t in range(tables)}, world_size=2
    )
    env = ShardingEnv.from_process_group(ctx.pg)
    sharded = EmbeddingBagCollectionSharder(fused_params=FUSED).shard(ebc, plan, env)
    keys, values, lengths = _batch(ctx.rank, tables, batch)
    kjt = KeyedJaggedTensor(keys, values % rows, lengths=lengths, stride=batch)

    def step() -> object:
        out = sharded(kjt).wait()
        out.values().sum().backward()
        if kind == "data_parallel":
            for p in sharded.parameters():
                p.grad = None
        return out

    _PHASES[:] = [(sharded, kjt)]  # for --profile (profile_rank)
    return step


def _torchrec(
    ctx: RankContext, kind: str, tables: int, rows: int, batch: int
) -> Callable[[], object] | str:
    try:
        import torchrec
        from torchrec.distributed.embeddingbag import (
            EmbeddingBagCollectionSharder as TrcSharder,
        )
        from torchrec.distributed.sharding_plan import (
            column_wise as trc_cw,
        )
        from torchrec.distributed.sharding_plan import (
            construct_module_sharding_plan as trc_plan,
        )
        from torchrec.distributed.sharding_plan import (
            data_parallel as trc_dp,
        )
        from torchrec.distributed.sharding_plan import (
            table_wise as trc_tw,
        )
        from torchrec.distributed.types import ShardingEnv as TrcEnv
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TrcKJT
    except Exception as exc:  # torchrec missing, or its fbgemm does not load
        return f"TorchRec unavailable: {type(exc).__name__}: {exc}"

    configs = [
        torchrec.EmbeddingBagConfig(
            name=f"t{t}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f"f{t}"]
        )
        for t in range(tables)
    ]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    gen = {
        # compute_kernel="fused" is needed: without it TorchRec 1.8's plan helpers pick the
        # DENSE kernel (dense table gradients), a different algorithm than ours.
        "table_wise": lambda t: trc_tw(rank=t % 2, compute_kernel="fused"),
        "column_wise": lambda t: trc_cw(ranks=[0, 1], compute_kernel="fused"),
        "data_parallel": lambda t: trc_dp(),
    }[kind]
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    fused = {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.01}
    sharder = TrcSharder(fused_params=fused)
    plan = trc_plan(
        ebc,
        {f"t{t}": gen(t) for t in range(tables)},  # type: ignore[no-untyped-call]  # torchrec is untyped
        local_size=2,
        world_size=2,
        device_type="cpu",
        sharder=sharder,
    )
    if kind != "data_parallel":
        kernels = {ps.compute_kernel for ps in plan.values()}
        if kernels != {"fused"}:
            return f"TorchRec plan picked compute kernels {sorted(kernels)}, expected fused"
    differs = _plan_differs(kind, tables, rows, plan)
    if differs:
        return differs
    env = TrcEnv.from_process_group(ctx.pg)
    sharded = sharder.shard(ebc, plan, env, torch.device("cpu"))
    keys, values, lengths = _batch(ctx.rank, tables, batch)
    kjt = TrcKJT(keys=keys, values=values % rows, lengths=lengths, stride=batch)

    def step() -> object:
        out = sharded(kjt).wait()
        out.values().sum().backward()
        if kind == "data_parallel":  # TorchRec wraps replicated lookups in DDP: grads all-reduced
            for p in sharded.parameters():
                p.grad = None
        return out

    return step


def _geometry(entry: object) -> tuple[object, ...]:
    """A plan entry's placement: its ranks and each shard's (offsets, sizes), as plain lists
    (the same attribute names in ours and TorchRec's `ParameterSharding`)."""
    spec = getattr(entry, "sharding_spec", None)
    shards = getattr(spec, "shards", None) or []
    return (
        list(getattr(entry, "ranks", None) or []),
        [(list(s.shard_offsets), list(s.shard_sizes)) for s in shards],
    )


def _plan_differs(kind: str, tables: int, rows: int, theirs: object) -> str:
    """Why TorchRec's plan places the tables differently from ours for `kind` ("" when
    alike): both libraries must run the same shards (column_wise: two 32-wide blocks of
    every table on ranks 0 and 1) for the ratio to compare kernels and exchanges."""
    configs = [
        EmbeddingBagConfig(
            name=f"t{t}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f"f{t}"]
        )
        for t in range(tables)
    ]
    ebc = EmbeddingBagCollection(configs, device="meta")
    ours = construct_module_sharding_plan(
        ebc, {f"t{t}": _ours_plan(kind, t) for t in range(tables)}, world_size=2
    )
    for name, entry in ours.items():
        mine, other = _geometry(entry), _geometry(theirs[name])  # type: ignore[index]  # a plan
        if mine != other:
            return f"TorchRec's plan places {name} as {other}, ours as {mine}: not comparable"
    return ""


# kind, ours ms, TorchRec ms, CPU ms ours, CPU ms TorchRec, note, faults ours, faults TorchRec
Row = tuple[str, float, float | None, float, float | None, str, float, float | None]


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


_STEPS: dict[str, Callable[[], object]] = {}  # per rank process: side -> the built step


def setup_rank(ctx: RankContext, side: str, kind: str, tables: int, rows: int, batch: int) -> str:
    """Build `side`'s ("ours" / "torchrec") step for `kind` in this rank and warm it up (two
    steps: what is kept across steps exists by then); "" or why it cannot run."""
    torch.set_num_threads(1)
    _STEPS.clear()
    built: Callable[[], object] | str
    if side == "ours":
        built = _ours(ctx, kind, tables, rows, batch)
    else:
        built = _torchrec(ctx, kind, tables, rows, batch)
    if isinstance(built, str):
        return built
    built()
    built()
    _STEPS[side] = built
    return ""


def timed_step(ctx: RankContext, side: str) -> tuple[float, float, float]:
    """One step of the built `side`: (wall ms, process CPU ms, minor page faults)."""
    fn = _STEPS[side]
    dist.barrier(group=ctx.pg)
    flt = _minflt()
    start, cpu_start = time.perf_counter(), time.process_time()
    fn()
    wall = (time.perf_counter() - start) * 1e3
    cpu = (time.process_time() - cpu_start) * 1e3
    return wall, cpu, float(_minflt() - flt)


def drop_rank(ctx: RankContext) -> None:
    _STEPS.clear()


# --- --profile: where rank 0's step goes, phase by phase (ours only) ---

_PHASES: list[tuple[ShardedEmbeddingBagCollection, KeyedJaggedTensor]] = []  # per rank: ours' last
_BACKWARD_NODES = {  # autograd node -> phase of the backward
    "_PlaceBackward": "bwd: assembly (output gradient into the all-to-all send blocks)",
    "_LinkBackward": "bwd: pooled gradient exchange (incl. wait)",
    "_SegmentLookupBackward": "bwd: fused update (native one-pass, all groups)",
}


def profile_rank(
    ctx: RankContext, kind: str, tables: int, rows: int, batch: int, steps: int
) -> list[tuple[str, float, float]]:
    """`steps` steps of ours' `kind`, phase by phase: (phase, thread CPU ms, wall ms) per step,
    means. Forward phases are timed around the module's own phases (`input_dist` + wait,
    `compute`, `output_dist` + wait with the assembly); backward phases by hooks on their
    autograd nodes (the main thread runs them)."""
    setup_rank(ctx, "ours", kind, tables, rows, batch)
    sharded, kjt = _PHASES[0]
    acc: dict[str, list[float]] = {}

    def add(name: str, cpu: float, wall: float) -> None:
        cell = acc.setdefault(name, [0.0, 0.0])
        cell[0] += cpu * 1e3
        cell[1] += wall * 1e3

    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        t0, w0 = time.thread_time(), time.perf_counter()
        yield
        add(name, time.thread_time() - t0, time.perf_counter() - w0)

    def hook(node: torch.autograd.graph.Node, name: str) -> None:
        began: list[float] = []

        def pre(grads: object) -> None:
            began[:] = [time.thread_time(), time.perf_counter()]

        def post(grads_in: object, grads_out: object) -> None:
            add(name, time.thread_time() - began[0], time.perf_counter() - began[1])

        node.register_prehook(pre)
        node.register_hook(post)

    def hook_graph(root: torch.autograd.graph.Node | None) -> None:
        seen: set[int] = set()
        todo = [root]
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            label = _BACKWARD_NODES.get(node.name())
            if label is not None:
                hook(node, label)
            todo.extend(n for n, _ in node.next_functions)

    cpu0 = time.process_time()
    for _ in range(steps):
        dist.barrier(group=ctx.pg)
        with timed("fwd: input dist (send ids, wait)"):
            got = sharded.input_dist(kjt).wait()
        with timed("fwd: lookup (compute)"):
            local = sharded.compute(got)
        with timed("fwd: output dist + assembly (incl. wait)"):
            out = sharded.output_dist(got, local).wait()
        loss = out.values().sum()
        hook_graph(loss.grad_fn)
        with timed("bwd: all"):
            loss.backward()  # type: ignore[no-untyped-call]  # torch stubs
        if kind == "data_parallel":  # as the timed step does
            for p in sharded.parameters():
                p.grad = None
    process = (time.process_time() - cpu0) * 1e3 / steps
    rows_out = [(name, cpu / steps, wall / steps) for name, (cpu, wall) in acc.items()]
    rows_out.append(("step, process CPU (all threads: gloo's too)", process, float("nan")))
    return rows_out


def profile_types(types: list[str], tables: int, rows: int, batch: int, steps: int) -> None:
    """Print rank 0's phase table of each type side by side (`--profile`)."""
    pool = RankPool(2, timeout_s=1800)
    pool.start()
    try:
        got = {kind: pool.run(profile_rank, kind, tables, rows, batch, steps)[0] for kind in types}
    finally:
        pool.close()
    names: list[str] = []
    for kind in types:
        names.extend(n for n, _, _ in got[kind] if n not in names)
    print(f"rank 0, ms per step (mean of {steps}), thread CPU / wall; load {_loadavg()}")
    print("| phase | " + " | ".join(types) + " |")
    print("|---|" + "---|" * len(types))
    for name in names:
        cells = []
        for kind in types:
            found = [(c, w) for n, c, w in got[kind] if n == name]
            if not found:
                cells.append("-")
                continue
            cpu, wall = found[0]
            cells.append(f"{cpu:.1f}" if wall != wall else f"{cpu:.1f} / {wall:.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def bench(
    pools: dict[str, RankPool], tables: int, rows: int, batch: int, repeats: int, types: list[str]
) -> list[Row]:
    """Ours in `pools["ours"]`, TorchRec (if given) in `pools["torchrec"]`, steps alternating;
    rank 0's medians."""
    out: list[Row] = []
    for kind in types:
        sides = ["ours"]
        note = "TorchRec has no CPU implementation"
        if "torchrec" not in pools:
            note = "not run (--no-torchrec)"
        elif kind in TORCHREC_TYPES:
            note = pools["torchrec"].run(setup_rank, "torchrec", kind, tables, rows, batch)[0]
            if not note:
                sides.append("torchrec")
        pools["ours"].run(setup_rank, "ours", kind, tables, rows, batch)
        got: dict[str, list[tuple[float, float, float]]] = {side: [] for side in sides}
        for _ in range(repeats):
            for side in sides:
                got[side].append(pools[side].run(timed_step, side)[0])
        # The step's floor from this run's own counts, printed beside ours (issue 28).
        from _sharded_floor import floor_rank, print_floor  # benchmarks/_sharded_floor.py

        print_floor(kind, pools["ours"].run(floor_rank, __name__, kind), got["ours"])
        for pool in pools.values():
            pool.run(drop_rank)
        med = {
            side: [statistics.median(x[i] for x in got[side]) for i in range(3)] for side in sides
        }
        ours = med["ours"]
        ref = med.get("torchrec")
        out.append(
            (
                kind,
                ours[0],
                None if ref is None else ref[0],
                ours[1],
                None if ref is None else ref[1],
                note,
                ours[2],
                None if ref is None else ref[2],
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--types", default=",".join(TYPES), help="sharding types, comma-separated")
    parser.add_argument("--no-torchrec", action="store_true", help="time ours only")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per type")
    parser.add_argument(
        "--assembly", action="store_true", help="time the output assembly alone (one process)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="ours only: rank 0's step phase by phase per type"
    )
    args = parser.parse_args()
    if args.assembly:
        assembly(26, 1024, 31)
        return
    if args.profile:
        kinds = [t for t in args.types.split(",") if t]
        if not kinds or set(kinds) - set(TYPES):
            parser.error(f"--profile takes sharding types from {TYPES}, got {args.types!r}")
        shape = (4, 10_000, 128) if args.quick else (26, 100_000, 1024)
        profile_types(kinds, *shape, args.repeats or (3 if args.quick else 10))
        return
    types = [t for t in args.types.split(",") if t]
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        parser.error(f"unknown sharding types {unknown}; choose from {TYPES}")
    tables, rows, batch, repeats = (4, 10_000, 128, 3) if args.quick else (26, 100_000, 1024, 7)
    if args.repeats is not None:
        repeats = args.repeats
    print(f"machine: {platform.platform()}, 1 intra-op thread per rank, ", end="")
    print(f"{os.cpu_count()} cpus, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(
        f"shapes: {tables} tables x {rows} rows x dim {DIM}, batch {batch} per rank, "
        f"~{MEAN_IDS} ids per bag, 2 gloo ranks, fused {FUSED['optimizer']}"
    )
    load_before = _loadavg()
    pools = {"ours": RankPool(2, timeout_s=1800)}
    if not args.no_torchrec:
        pools["torchrec"] = RankPool(2, timeout_s=1800)
    try:
        pools["ours"].start()
        if "torchrec" in pools:
            # TorchRec as shipped: without the allocator setting importing shardrec_sharding
            # applies (it is process-wide, docs/design/sharding-buffer-reuse.md).
            saved = os.environ.get("SHARDREC_MALLOC_TUNING")
            os.environ["SHARDREC_MALLOC_TUNING"] = "0"
            try:
                pools["torchrec"].start()
            finally:
                if saved is None:
                    del os.environ["SHARDREC_MALLOC_TUNING"]
                else:
                    os.environ["SHARDREC_MALLOC_TUNING"] = saved
        # the traffic probe runs twice, before and after the steps, its rounds pooled: the
        # allowance takes gloo's medians over both (the load drifts over a run)
        probe_rounds = max(repeats, 15) // 2 + 1
        views, first = measure_traffic(pools["ours"], types, tables, rows, batch, probe_rounds)
        results = bench(pools, tables, rows, batch, repeats, types)
        _, second = measure_traffic(pools["ours"], types, tables, rows, batch, probe_rounds)
        comm, rounds = summarize_traffic(views, [first, second])
    finally:
        for pool in pools.values():
            pool.close()
    print(f"1-minute load average: {load_before} before -> {_loadavg()} after")
    print(
        "| sharding type | ours (ms) | TorchRec 1.8 (ms) | TorchRec / ours "
        "| CPU ms ours / TorchRec (rank 0) | page faults per step ours / TorchRec (rank 0) |"
    )
    print("|---|---|---|---|---|---|")
    for kind, ours, ref, cpu_ours, cpu_ref, note, flt_ours, flt_ref in results:
        if ref is None or cpu_ref is None or flt_ref is None:
            print(
                f"| {kind} | {ours:.1f} | - ({note}) | - | {cpu_ours:.1f} / - "
                f"| {flt_ours:.0f} / - |"
            )
        else:
            print(
                f"| {kind} | {ours:.1f} | {ref:.1f} | {ref / ours:.2f}x "
                f"| {cpu_ours:.1f} / {cpu_ref:.1f} | {flt_ours:.0f} / {flt_ref:.0f} |"
            )
    print_traffic(results, comm, rounds)


def assembly(tables: int, batch: int, repeats: int) -> None:
    """The output assembly alone, table_wise over 2 ranks (tables alternating), one process:
    the old concatenation + column `index_select` (backward: `index_add` into zeros, then the
    split back into the received blocks) against `ColumnPlacement`'s block copies. Forward +
    backward with a dense output gradient, min and median ms of `repeats`."""
    from shardrec_sharding._columns import ColumnPlacement

    torch.set_num_threads(1)
    half = (tables + 1) // 2
    widths = [half * DIM, (tables - half) * DIM]
    cols = {
        t: [(t % 2) * widths[0] + (t // 2) * DIM + c for c in range(DIM)] for t in range(tables)
    }
    placement = ColumnPlacement([widths], [cols], [(t, DIM) for t in range(tables)])
    index = torch.tensor([c for t in range(tables) for c in cols[t]])
    flat = torch.randn(batch * sum(widths), requires_grad=True)
    grad = torch.randn(batch, tables * DIM)

    def old() -> None:
        blocks = torch.split(flat, [batch * w for w in widths])
        wide = torch.cat([b.view(batch, w) for b, w in zip(blocks, widths, strict=True)], 1)
        wide.index_select(1, index).backward(grad)  # type: ignore[no-untyped-call]  # torch stubs

    def new() -> None:
        placement([flat], batch).backward(grad)  # type: ignore[no-untyped-call]  # torch stubs

    samples: dict[str, list[float]] = {"cat + index_select": [], "block copies": []}
    for _ in range(repeats):
        for name, fn in (("cat + index_select", old), ("block copies", new)):
            flat.grad = None
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    print(f"output assembly, {tables} tables x dim {DIM}, batch {batch}, fwd + bwd (ms):")
    for name, got in samples.items():
        print(f"  {name}: min {min(got):.2f}, median {statistics.median(got):.2f}")


# --- traffic accounting: what each sharding type moves per step, and what gloo needs for it ---

# phase name, bytes rank `rank` sends to the other rank, bytes it receives from the other rank
Exchange = tuple[str, int, int]
TRAFFIC_TYPES = {"table_wise", "column_wise", "row_wise", "table_row_wise"}


def _ids_per_table(rank: int, tables: int, rows: int, batch: int) -> list[torch.Tensor]:
    """Rank `rank`'s ids of each table, as `_ours` feeds them (one feature per table)."""
    _, values, lengths = _batch(rank, tables, batch)
    counts = lengths.view(tables, batch).sum(1).tolist()
    return list(torch.split(values % rows, counts))


def traffic(kind: str, rank: int, tables: int, rows: int, batch: int) -> list[Exchange]:
    """Bytes `rank` sends to / receives from the other rank in one step of `kind`, per exchange,
    from the shapes and the benchmark's (seeded) batches; data moved to itself is not counted.
    Ids and lengths travel as the int64 the KJT holds; pooled rows and their gradients as fp32.
    table_wise: ids and lengths of the other rank's tables out, that rank's pooled rows (its
    batch x its tables' columns) back, the same bytes again as gradients. column_wise: every
    table's ids to both ranks, half the columns of every table back. row_wise (and
    table_row_wise, which on one host of 2 ranks is row_wise): each id to the rank owning its
    row block, every feature's lengths to every rank; forward a reduce-scatter of every
    table's partial sums (the other rank's batch x all columns), backward an all-gather of the
    same size. The small header exchange (the same for every type) is left out."""
    if kind not in TRAFFIC_TYPES:
        raise ValueError(f"no traffic model for {kind!r}; have {sorted(TRAFFIC_TYPES)}")
    other = 1 - rank
    mine, theirs = (_ids_per_table(r, tables, rows, batch) for r in (rank, other))
    if kind == "table_wise":
        owned = [t for t in range(tables) if t % 2 == rank]
        foreign = [t for t in range(tables) if t % 2 == other]
        ids = (
            sum(8 * mine[t].numel() for t in foreign),
            sum(8 * theirs[t].numel() for t in owned),
        )
        lens = (8 * batch * len(foreign), 8 * batch * len(owned))
        pooled = (4 * batch * DIM * len(owned), 4 * batch * DIM * len(foreign))
        return [
            ("lengths", *lens),
            ("ids", *ids),
            ("pooled out", *pooled),
            ("pooled grad", pooled[1], pooled[0]),
        ]
    if kind == "column_wise":
        ids = (sum(8 * m.numel() for m in mine), sum(8 * t.numel() for t in theirs))
        half = 4 * batch * tables * DIM // 2
        return [
            ("lengths", 8 * batch * tables, 8 * batch * tables),
            ("ids", *ids),
            ("pooled out", half, half),
            ("pooled grad", half, half),
        ]
    block = -(-rows // 2)  # ceil(rows / 2): rank 0 owns [0, block), rank 1 the rest

    def foreign_ids(per_table: list[torch.Tensor], owner: int) -> int:
        in_block = [(v >= block) if owner == 1 else (v < block) for v in per_table]
        return sum(8 * int(m.sum()) for m in in_block)

    full = 4 * batch * tables * DIM
    return [
        ("lengths", 8 * batch * tables, 8 * batch * tables),
        ("ids", foreign_ids(mine, other), foreign_ids(theirs, rank)),
        ("pooled out (reduce-scatter)", full, full),
        ("pooled grad (all-gather)", full, full),
    ]


def gloo_ms(ctx: RankContext, views: dict[str, list[list[Exchange]]], repeats: int) -> Samples:
    """Per sharding type and exchange, the (wall ms, process CPU ms) samples of an
    `all_to_all_single` moving exactly its bytes (uint8, nothing to itself) in this rank's
    process group; `views[kind][r]` is rank r's view. Same processes, same gloo group as the
    timed steps. The types' exchanges are timed in rounds, every type once per round (after
    two warm-up rounds), so that a round's totals of two types are a pair measured within
    milliseconds of each other (`allowance`)."""
    rank = ctx.rank
    buffers = {
        kind: [
            (
                torch.zeros(ex[rank][i][1], dtype=torch.uint8),
                torch.empty(ex[rank][i][2], dtype=torch.uint8),
            )
            for i in range(len(ex[0]))
        ]
        for kind, ex in views.items()
    }
    got: Samples = {kind: [([], []) for _ in bufs] for kind, bufs in buffers.items()}
    for round_ in range(repeats + 2):
        for kind, bufs in buffers.items():
            for i, (src, dst) in enumerate(bufs):
                send, recv = src.numel(), dst.numel()
                splits_in = [0, send] if rank == 0 else [send, 0]
                splits_out = [0, recv] if rank == 0 else [recv, 0]
                dist.barrier(group=ctx.pg)
                start, cpu_start = time.perf_counter(), time.process_time()
                dist.all_to_all_single(dst, src, splits_out, splits_in, group=ctx.pg)
                wall = (time.perf_counter() - start) * 1e3
                cpu = (time.process_time() - cpu_start) * 1e3
                if round_ >= 2:
                    got[kind][i][0].append(wall)
                    got[kind][i][1].append(cpu)
    return got


# exchange, bytes sent, bytes received, gloo wall ms, gloo CPU ms (rank 0; medians)
Traffic = list[tuple[str, int, int, float, float]]
# per type, per round: gloo's (wall ms, CPU ms) for all its exchanges (rank 0)
Rounds = dict[str, list[tuple[float, float]]]
# per type, per exchange: gloo_ms's (wall ms samples, CPU ms samples)
Samples = dict[str, list[tuple[list[float], list[float]]]]


def measure_traffic(
    pool: RankPool, kinds: list[str], tables: int, rows: int, batch: int, repeats: int
) -> tuple[dict[str, list[list[Exchange]]], Samples]:
    """Per sharding type with a traffic model: both ranks' views of its exchanges and rank 0's
    `gloo_ms` samples of them, measured in `pool`'s ranks (empty without such a type)."""
    views = {
        kind: [traffic(kind, r, tables, rows, batch) for r in (0, 1)]
        for kind in kinds
        if kind in TRAFFIC_TYPES
    }
    if not views:
        return {}, {}
    return views, pool.run(gloo_ms, views, repeats)[0]


def summarize_traffic(
    views: dict[str, list[list[Exchange]]], probes: list[Samples]
) -> tuple[dict[str, Traffic], Rounds]:
    """The probes' samples pooled: per type, per exchange, gloo's median time; per type, per
    round, the total over its exchanges (rounds of every probe)."""
    comm: dict[str, Traffic] = {}
    rounds: Rounds = {}
    for kind, view in views.items():
        per_exchange = [
            ([w for p in probes for w in p[kind][i][0]], [c for p in probes for c in p[kind][i][1]])
            for i in range(len(view[0]))
        ]
        comm[kind] = [
            (n, s, r, statistics.median(w), statistics.median(c))
            for (n, s, r), (w, c) in zip(view[0], per_exchange, strict=True)
        ]
        rounds[kind] = [
            (sum(w[j] for w, _ in per_exchange), sum(c[j] for _, c in per_exchange))
            for j in range(len(per_exchange[0][0]))
        ]
    return comm, rounds


def paired_allowance(rounds: Rounds, kind: str, which: int) -> tuple[float, float, float]:
    """A second estimate of the extra gloo time `kind`'s traffic takes over table_wise's
    (which: 0 wall, 1 CPU): the median over rounds of the round's difference (both measured
    in the same round), with the quartiles of those differences. Session 12, 20 runs at load
    8-14: lower on average than the verdict's estimate (2.54 vs 2.81 ms CPU for row_wise) but
    no steadier between runs (standard deviation 0.61 vs 0.43 ms): printed beside it only."""
    diffs = sorted(
        a[which] - b[which] for a, b in zip(rounds[kind], rounds["table_wise"], strict=True)
    )
    q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
    return statistics.median(diffs), q[0], q[2]


def print_traffic(results: list[Row], comm: dict[str, Traffic], rounds: Rounds) -> None:
    """Rank 0's bytes per step and gloo's time for them, per type; then each type's step minus
    table_wise's beside the extra gloo time its extra traffic accounts for (the allowance),
    in wall time and in rank 0's process CPU time (the steadier one on a loaded machine)."""
    if not comm:
        return
    ours = {r[0]: (r[1], r[3]) for r in results}
    print("traffic per step, rank 0 (sent to / received from the other rank), gloo measured:")
    print("| sharding type | exchange | sends (MB) | receives (MB) | gloo ms (wall / CPU) |")
    print("|---|---|---|---|---|")
    total: dict[str, tuple[float, float]] = {}
    for kind, rows_ in comm.items():
        for name, send, recv, wall, cpu in rows_:
            print(
                f"| {kind} | {name} | {send / 1e6:.2f} | {recv / 1e6:.2f} "
                f"| {wall:.2f} / {cpu:.2f} |"
            )
        total[kind] = (sum(x[3] for x in rows_), sum(x[4] for x in rows_))
        sent, recd = sum(x[1] for x in rows_) / 1e6, sum(x[2] for x in rows_) / 1e6
        print(
            f"| {kind} | total | {sent:.2f} | {recd:.2f} "
            f"| {total[kind][0]:.2f} / {total[kind][1]:.2f} |"
        )
    if "table_wise" not in total:
        return
    print("extra over table_wise: the step's difference vs gloo's time for the extra traffic")
    print(
        "(allowed: gloo's medians per exchange over two probes, before and after the steps, "
        "summed, table_wise's subtracted; beside it the median of each round's paired CPU "
        "difference and its quartiles)"
    )
    print(
        "| sharding type | ours wall / CPU (ms) | extra over table_wise, wall / CPU (ms) "
        "| allowed extra, wall / CPU (ms) | paired CPU allowance (quartiles) "
        "| verdict wall | verdict CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in total:
        if kind == "table_wise":
            continue
        cells = []
        for k in (0, 1):
            extra = ours[kind][k] - ours["table_wise"][k]
            allowed = total[kind][k] - total["table_wise"][k]
            verdict = "within" if extra <= allowed else f"over by {extra - allowed:.1f} ms"
            cells.append((extra, allowed, verdict))
        (ew, aw, vw), (ec, ac, vc) = cells
        paired, lo, hi = paired_allowance(rounds, kind, 1)
        print(
            f"| {kind} | {ours[kind][0]:.1f} / {ours[kind][1]:.1f} | {ew:+.1f} / {ec:+.1f} "
            f"| {aw:+.1f} / {ac:+.1f} | {paired:+.1f} ({lo:+.1f} - {hi:+.1f}) | {vw} | {vc} |"
        )


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "n/a"


if __name__ == "__main__":
    main()
