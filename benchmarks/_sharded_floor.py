"""The floor of benchmarks/sharded.py's step, measured in its own rank processes (issue 28).

For one sharding type, from the counts of the run just timed (rank by rank, after one input
dist + lookup of the module sharded.py built: the ids + lengths bytes each rank receives, as
the input dist delivers them; the ids it pools, `shard columns x 4` bytes each, from its shards,
whose rows are the span of the ids seen; the unique rows it updates; the pooled bytes it sends
and receives), the least time this machine needs for each piece of the step:

- ids in: a gloo all-to-all of the received ids + lengths bytes (this rank's own part included,
  as the step's exchange does), in these processes;
- lookup: a sum-pooled lookup of those ids into those bags, the least of a C loop
  (_sharded_floor.c, prefetching) and torch's `embedding_bag`;
- pooled rows out, gradients back: gloo all-to-alls of the pooled bytes each way;
- update: one pass of row-wise Adagrad over the sorted unique rows (C loop): each row and its
  momentum read and written once (prefetched ahead), gradients from a block that stays in
  cache (issue 28's floor counts the rows and momentum only); the dedup and the gradient sums
  left out. Without a C compiler: an `index_select` + numpy row assignment back (no floor);
- data_parallel: no exchanges of ids or rows; the dense gradients' all-reduce instead, and no
  update (the timed step drops the gradients);
- 1 ms for the rest of the step (loss, autograd, bookkeeping): an assumption, the issue's.

The floor's tables are plain tensors of the local shards' size, on 2 MB pages as the module's
packed tables are. Each piece is the least wall time and the least process CPU time of a few
repeats (both ranks run each piece together, after a barrier).
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from shardrec_embedding.memory import huge_pages
from shardrec_testing import RankContext

REST_MS = 1.0  # assumed: loss, autograd, bookkeeping (issue 28's figure)
GOAL = 1.6  # issue 28: the step at most 1.6x this machine's floor
REPEATS = 5
GRAD_ROWS = 64  # the update's gradient block, cache-resident (the floor moves rows + momentum)
PIECES = ("ids in", "lookup", "pooled rows out", "gradients back", "update", "rest (assumed)")
COUNTS = (  # what the pieces moved, rank by rank (`floor_rank`'s "n:" entries)
    "n:ids in bytes",
    "n:rows looked up",
    "n:row bytes",
    "n:table MB",
    "n:unique rows",
    "n:pooled bytes sent",
    "n:dense gradient bytes",
    "n:measure s",
)

# piece -> least wall ms, "<piece> cpu" -> least process CPU ms (all threads: gloo's too),
# plus the counts under "n:" keys
Floor = dict[str, float]


def _least(fn: Callable[[], object], pg: dist.ProcessGroup, repeats: int) -> tuple[float, float]:
    """Least wall ms and least process CPU ms of `repeats` calls of `fn`, the ranks started
    together. The CPU time holds up on a loaded machine, where wall time counts the waits."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        dist.barrier(group=pg)
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        cpu = min(cpu, (time.process_time() - cpu_start) * 1e3)
        wall = min(wall, (time.perf_counter() - start) * 1e3)
    return wall, cpu


def _transpose(pg: dist.ProcessGroup, row: list[int]) -> list[int]:
    """Entry `me` of every rank's `row`: what this rank receives in an all-to-all where each
    rank sends `row[d]` to rank d (and what it sends, where `row` counts what it receives)."""
    world = dist.get_world_size(pg)
    rows = [torch.zeros(world, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(rows, torch.tensor(row, dtype=torch.int64), group=pg)
    me = dist.get_rank(pg)
    return [int(rows[src][me]) for src in range(world)]


def _all_to_all(pg: dist.ProcessGroup, send: list[int], repeats: int) -> tuple[float, float]:
    """Least (wall, CPU) ms of a gloo all-to-all sending `send[d]` bytes to rank d."""
    recv = _transpose(pg, send)
    moved = torch.tensor([sum(send)], dtype=torch.int64)
    dist.all_reduce(moved, group=pg)
    if int(moved) == 0:  # nothing exchanged (data_parallel): no piece
        return 0.0, 0.0
    inp = torch.ones(sum(send), dtype=torch.uint8)
    out = torch.empty(sum(recv), dtype=torch.uint8)

    def run() -> None:
        dist.all_to_all_single(out, inp, recv, send, group=pg)

    return _least(run, pg, repeats)


def _by_width(
    tables: list[tuple[int, int]], index: list[torch.Tensor]
) -> list[tuple[int, int, torch.Tensor]]:
    """Tables of one column width stacked in one buffer: (columns, rows, `index` offset into
    it) per width."""
    out = []
    for cols in sorted({c for _, c in tables}):
        base, parts = 0, []
        for (rows, c), got in zip(tables, index, strict=True):
            if c == cols:
                parts.append(got + base)
                base += rows
        out.append((cols, base, torch.cat(parts).to(torch.int64).contiguous()))
    return out


@functools.cache
def _kernels() -> ctypes.CDLL | None:
    """_sharded_floor.c built by shardrec_embedding's native loader (None: no compiler)."""
    from shardrec_embedding._native.loader import native_library_at

    with warnings.catch_warnings():  # none: the torch fallbacks are named in the report
        warnings.simplefilter("ignore")
        lib = native_library_at(Path(__file__).with_name("_sharded_floor.c"))
    if lib is not None:
        ptr, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        lib.floor_pool.argtypes = [ptr, ptr, ptr, i64, i64, ptr]
        lib.floor_update.argtypes = [ptr, ptr, ptr, ptr, i64, i64, i64, f32, f32]
    return lib


def _p(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _local_pieces(
    tables: list[tuple[int, int]],
    ids: list[torch.Tensor],
    bags: list[torch.Tensor],
    uniq: list[torch.Tensor],
    pg: dist.ProcessGroup,
    repeats: int,
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The lookup and the update, least (wall, CPU) ms each, on one buffer per column width
    holding this rank's shards (`(rows, cols)` per table in `tables`):

    - lookup: pool `ids[i]`'s rows of table i into bags of sizes `bags[i]`, the least of
      _sharded_floor.c's loop and torch's `embedding_bag` (sum);
    - update: row-wise Adagrad on the unique rows `uniq[i]` (sorted, as a dedup leaves them)
      from a cache-resident gradient block: each row and its momentum read and written once
      (_sharded_floor.c; without a compiler, an `index_select` + numpy row assignment back).
      The dedup and the gradient sums are left out.

    Every rank times the same calls (the same barriers, whatever it holds)."""
    lib = _kernels()
    buffers = []
    for (cols, rows, flat), (_, _, once) in zip(
        _by_width(tables, ids), _by_width(tables, uniq), strict=True
    ):
        widths = zip(bags, tables, strict=True)
        lengths = torch.cat([b for b, (_, c) in widths if c == cols]).to(torch.int64)
        offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=offsets[1:])
        weight, momentum = torch.empty(rows, cols).fill_(0.5), torch.empty(rows).fill_(0.5)
        huge_pages(weight)  # as the sharded module's packed tables (2 MB pages: fewer TLB misses)
        huge_pages(momentum)
        pooled = torch.empty(lengths.numel(), cols).fill_(0.0)  # touched: no faults timed
        grads = torch.empty(min(GRAD_ROWS, max(once.numel(), 1)), cols).fill_(1e-3)
        buffers.append((weight, momentum, flat, offsets, pooled, once, grads))

    def pool_c() -> None:
        assert lib is not None
        for weight, _, flat, offsets, pooled, _, _ in buffers:
            n, cols = pooled.shape
            lib.floor_pool(_p(weight), _p(flat), _p(offsets), n, cols, _p(pooled))

    def pool_torch() -> None:
        for weight, _, flat, offsets, _, _, _ in buffers:
            torch.nn.functional.embedding_bag(flat, weight, offsets[:-1], mode="sum")

    def update_c() -> None:
        assert lib is not None
        for weight, momentum, _, _, _, once, grads in buffers:
            gn, cols = grads.shape
            n = once.numel()
            lib.floor_update(_p(weight), _p(momentum), _p(once), _p(grads), n, gn, cols, 0.01, 1e-8)

    def update_torch() -> None:
        for weight, momentum, _, _, _, once, _ in buffers:
            rows = torch.index_select(weight, 0, once)
            weight.numpy()[once.numpy()] = rows.numpy()
            momentum.numpy()[once.numpy()] = momentum.numpy()[once.numpy()]

    timings = [_least(pool_torch, pg, repeats)]
    if lib is not None:
        timings.append(_least(pool_c, pg, repeats))
    lookup = (min(t[0] for t in timings), min(t[1] for t in timings))
    return lookup, _least(update_c if lib is not None else update_torch, pg, repeats)


def floor_rank(ctx: RankContext, module_name: str, kind: str) -> Floor:
    """This rank's floor of `kind`'s step, from the sharded module benchmarks/sharded.py built
    last in this process (its `_PHASES`): one input dist and lookup give the counts."""
    start = time.perf_counter()
    sharded, kjt = sys.modules[module_name]._PHASES[0]
    pg = ctx.pg
    world = dist.get_world_size(pg)
    with torch.no_grad():
        got = sharded.input_dist(kjt).wait()
        local = sharded.compute(got)
    ids_to = [0] * world  # bytes of ids + lengths received from each rank
    pooled_to = [0] * world  # pooled bytes sent to each rank
    tables: list[tuple[int, int]] = []  # (shard rows, shard columns) per looked-up segment
    ids: list[torch.Tensor] = []
    bags: list[torch.Tensor] = []  # bag sizes per segment, all ranks' samples
    uniq: list[torch.Tensor] = []
    for d, pooled in zip(got.per_strategy, local, strict=True):
        f = d.features
        values, lengths = f.values(), f.lengths()
        nseg = len(d.key_index)
        cols = pooled.shape[1] // nseg if nseg else 0
        offsets = [0, *np.cumsum(f.length_per_key()).tolist()]
        nkeys = len(f.keys())
        per_key = lengths.view(nkeys, -1) if nkeys else lengths.view(0, 0)
        for k in d.key_index:
            seg = values[offsets[k] : offsets[k + 1]]
            if seg.numel() == 0:
                continue
            low, high = int(seg.min()), int(seg.max())  # shard rows: the span of the ids seen
            tables.append((high - low + 1, cols))
            ids.append(seg - low)
            bags.append(per_key[k])
            uniq.append(torch.unique(seg) - low)  # sorted
        batches = list(d.batch_size_per_rank)
        if len(batches) == world and world > 1:  # exchanged: ids in, pooled rows out
            start_row = 0
            for src, b in enumerate(batches):
                n = int(per_key[:, start_row : start_row + b].sum())
                ids_to[src] += n * values.element_size() + nkeys * b * lengths.element_size()
                start_row += b
                pooled_to[src] += b * pooled.shape[1] * pooled.element_size()
    got_ms = {
        "ids in": _all_to_all(pg, _transpose(pg, ids_to), REPEATS),  # sends: others' receipts
        "pooled rows out": _all_to_all(pg, pooled_to, REPEATS),
    }
    got_ms["lookup"], got_ms["update"] = _local_pieces(tables, ids, bags, uniq, pg, REPEATS)
    dense = 0
    if kind == "data_parallel":  # dense gradients all-reduced; the step updates nothing
        dense = sum(p.numel() * p.element_size() for p in sharded.parameters())
        grad = torch.ones(dense // 4)
        got_ms["gradients back"] = _least(lambda: dist.all_reduce(grad, group=pg), pg, 2)
        got_ms["update"] = (0.0, 0.0)
    else:  # back the way the rows came: this rank sends what it received
        got_ms["gradients back"] = _all_to_all(pg, _transpose(pg, pooled_to), REPEATS)
    got_ms["rest (assumed)"] = (REST_MS, REST_MS)
    out: Floor = {}
    for piece, (wall, cpu) in got_ms.items():
        out[piece], out[f"{piece} cpu"] = wall, cpu
    out["n:ids in bytes"] = float(sum(ids_to))
    out["n:rows looked up"] = float(sum(int(i.numel()) for i in ids))
    out["n:row bytes"] = float(tables[0][1] * 4 if tables else 0)
    out["n:table MB"] = sum(r * c * 4 for r, c in tables) / 1e6
    out["n:unique rows"] = float(sum(int(u.numel()) for u in uniq) if not dense else 0)
    out["n:pooled bytes sent"] = float(sum(pooled_to))
    out["n:dense gradient bytes"] = float(dense)
    out["n:measure s"] = time.perf_counter() - start
    return out


def print_floor(kind: str, floors: list[Floor], ours: list[tuple[float, float, float]]) -> None:
    """Rank 0's floor table of `kind` beside ours' median step (`ours`: sharded.py's
    `timed_step` samples, (wall ms, process CPU ms, page faults)), in wall and in CPU time;
    every rank's floor sum on the side."""
    f = floors[0]
    dense = f["n:dense gradient bytes"]
    print(
        f"floor of {kind} (rank 0; ids in {f['n:ids in bytes'] / 1e6:.2f} MB, "
        f"{f['n:rows looked up']:.0f} rows x {f['n:row bytes']:.0f} B pooled from "
        f"{f['n:table MB']:.0f} MB, {f['n:unique rows']:.0f} unique rows updated, pooled "
        f"{f['n:pooled bytes sent'] / 1e6:.2f} MB each way"
        + (f", dense gradients {dense / 1e6:.0f} MB all-reduced" if dense else "")
        + f"; least of {REPEATS}, measured in {f['n:measure s']:.1f} s; "
        f"rest {REST_MS} ms assumed)"
    )
    print("| ms | " + " | ".join(PIECES) + " | floor | ours (median) | ours / floor | goal |")
    print("|---" * (len(PIECES) + 5) + "|")
    for label, suffix, col in (("wall", "", 0), ("CPU", " cpu", 1)):
        total = sum(f[p + suffix] for p in PIECES)
        mine = statistics.median(x[col] for x in ours)
        ratio = mine / total if total > 0 else float("inf")
        verdict = f"<= {GOAL}x: {'met' if ratio <= GOAL else 'not met'}"
        cells = " | ".join(f"{f[p + suffix]:.2f}" for p in PIECES)
        print(f"| {label} | {cells} | {total:.2f} | {mine:.1f} | {ratio:.2f}x | {verdict} |")
    sums = [
        f"rank {r}: {sum(x[p] for p in PIECES):.1f} / {sum(x[p + ' cpu'] for p in PIECES):.1f}"
        for r, x in enumerate(floors)
    ]
    print("floor per rank, wall / CPU ms: " + ", ".join(sums))
