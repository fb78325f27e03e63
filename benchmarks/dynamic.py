"""Raw-id (dynamic) tables: id -> slot throughput, and a training step against a static table.

Run: ``.venv/bin/python benchmarks/dynamic.py`` (``--quick`` for a smoke run of small shapes).

1. Id -> slot map (`IdSlotMap.find`, native and torch backends) on one thread, at 50% and 90%
   load of its buckets, in millions of ids per second, beside the random-DRAM-access floor:
   one random 8-byte read per id from an array the size of the map's buckets (a torch gather).
2. Training step (forward + fused EXACT_ROWWISE_ADAGRAD backward) of 8 dynamic tables x
   capacity 100k x dim 64, batch 2048, 20 ids per bag, Zipf(1.05) raw ids (each rank
   scattered over the id space by a hash), LRU eviction, tables pre-filled to 50% and 95%
   occupancy, against static tables of the same size fed pre-mapped ids. Two id streams:
   "resident" (ranks over the ids already in the table: the map's cost alone, the same rows
   as the static table) and "stream" (ranks over 2^40: most ids are new, so every step
   admits, evicts and resets thousands of rows). Goal (issue 27): <= 1.3x.
3. Stream floor: the least memory work per new id of a full raw-id table beyond a static step
   (`FLOOR_LINES` random lines and the freed row's bytes written, `stream_floor`), measured
   in the same process, printed with the least ratio it allows beside the measured one.

Prints the machine, shapes, ours, the reference, the floor and the ratio; asserts nothing.
Numbers from a loaded machine are not comparable: measure on a quiet one.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from _dynamic_tables import table_configs  # benchmarks/_dynamic_tables.py

from shardrec_embedding.configs import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTable, DynamicTableConfig
from shardrec_embedding.dynamic.collection import reset_rows_hook
from shardrec_embedding.dynamic.hashing import mix64
from shardrec_embedding.dynamic.id_map import IdSlotMap, idmap_native_available
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec


def machine() -> str:
    return (
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )


def _best(fn: Callable[[], object], repeats: int) -> float:
    """Least process-CPU seconds of `repeats` calls (one thread: steadier than wall time on a
    shared machine)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def map_throughput(log2_buckets: int, queries: int, repeats: int) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    buckets = 1 << log2_buckets
    gen = torch.Generator().manual_seed(0)
    print(
        f"\n## id -> slot, one thread: {buckets} buckets ({buckets * 16 / 2**20:.0f} MiB), "
        f"{queries} hit queries per run, best of {repeats}"
    )
    print("| load | backend | find M ids / CPU s | DRAM floor M reads / CPU s | ours / floor |")
    print("|---|---|---|---|---|")
    floor_array = torch.zeros(buckets * 2, dtype=torch.int64)
    backends = ["native", "torch"] if idmap_native_available() else ["torch"]
    for load in (0.5, 0.9):
        n = int(buckets * load)
        ids = torch.unique(torch.randint(-(2**62), 2**62, (n + n // 8,), generator=gen))[:n]
        ids = ids[torch.randperm(ids.numel(), generator=gen)]
        query = ids[torch.randint(0, ids.numel(), (queries,), generator=gen)]
        where = torch.randint(0, floor_array.numel(), (queries,), generator=gen)
        floor = (
            queries / _best(functools.partial(floor_array.index_select, 0, where), repeats) / 1e6
        )
        for backend in backends:
            m = IdSlotMap(buckets, backend=backend)  # type: ignore[arg-type]
            m.insert(ids, torch.arange(ids.numel()))
            rate = queries / _best(functools.partial(m.find, query), repeats) / 1e6
            print(f"| {load:.0%} | {backend} | {rate:.1f} | {floor:.1f} | {rate / floor:.2f} |")
    torch.set_num_threads(threads)


def reset_rows(capacity: int, dim: int, rows: int, repeats: int) -> None:
    """Resetting `rows` freed slots of a `(capacity, dim)` table on one thread: the eager
    initializer (`init_weight_` on a `(rows, dim)` tensor, then a scatter: the reset before
    the counter-based rows) against the counter-based rows written in place
    (`dynamic/reset.py`), each after flushing the caches (as a training step does)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = EmbeddingBagConfig(
        name="t", num_embeddings=capacity, embedding_dim=dim, feature_names=["f"]
    )
    table = DynamicTable("t", DynamicTableConfig(), capacity, dim)
    weight = torch.zeros(capacity, dim)
    flush = torch.zeros(8 << 20)
    slots = torch.randperm(capacity, generator=torch.Generator().manual_seed(0))[:rows]
    hooks = [
        reset_rows_hook(lambda: weight, cfg),
        reset_rows_hook(lambda: weight, cfg, table=table),
    ]
    times: list[list[float]] = [[], []]
    for _ in range(repeats):
        for hook, out in zip(hooks, times, strict=True):
            flush.add_(1)
            start = time.process_time()
            hook(slots)
            out.append(time.process_time() - start)
    eager, counter = (1e3 * min(t) for t in times)
    print(
        f"\n## reset of {rows} freed rows x dim {dim} (table of {capacity}), one thread, "
        f"best of {repeats}"
    )
    print("| eager initializer + scatter ms | counter-based in place ms | ratio |")
    print("|---|---|---|")
    print(f"| {eager:.2f} | {counter:.2f} | {eager / counter:.1f} |")
    torch.set_num_threads(threads)


def zipf_ranks(n: int, limit: int, rng: np.random.Generator) -> torch.Tensor:
    """`n` Zipf(1.05) ranks in [0, limit) (ranks past the limit wrap around)."""
    ranks = rng.zipf(1.05, size=n) - 1
    return torch.from_numpy((ranks % limit).astype(np.int64))


def raw_id(ranks: torch.Tensor) -> torch.Tensor:
    """The raw id of each popularity rank: scattered over int64 by a hash."""
    return mix64(ranks + 1)


def batches(
    count: int, tables: int, batch: int, bag: int, capacity: int, pool: int, seed: int
) -> list[tuple[KeyedJaggedTensor, KeyedJaggedTensor]]:
    """(raw-id KJT, pre-mapped KJT) pairs of Zipf(1.05) ranks below `pool`: the raw ids are
    the ranks' hashes; the pre-mapped ids are the ranks themselves when `pool <= capacity`
    (the slots a table pre-filled with ranks 0, 1, ... in order gives), else the hashes
    modulo the capacity (the same popularity over the rows)."""
    rng = np.random.default_rng(seed)
    keys = [f"f{i}" for i in range(tables)]
    lengths = torch.full((tables * batch,), bag, dtype=torch.int64)
    out = []
    for _ in range(count):
        ranks = zipf_ranks(tables * batch * bag, pool, rng)
        raw = raw_id(ranks)
        mapped = ranks if pool <= capacity else (raw & ((1 << 62) - 1)) % capacity
        out.append(
            (
                KeyedJaggedTensor(keys=keys, values=raw, lengths=lengths),
                KeyedJaggedTensor(keys=keys, values=mapped, lengths=lengths),
            )
        )
    return out


def collection(tables: int, capacity: int, dim: int, dynamic: bool) -> FusedEmbeddingBagCollection:
    configs = table_configs(tables, capacity, dim, dynamic)
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)
    return FusedEmbeddingBagCollection(configs, spec)


def prefill(module: FusedEmbeddingBagCollection, count: int) -> None:
    """Insert the raw ids of ranks 0 .. count-1, in order (rank r gets slot r)."""
    ids = raw_id(torch.arange(count))
    for name in module.dynamic_tables.tables:
        module.dynamic_tables.table(name).map_ids(ids, training=True)


def step_times(
    modules: list[FusedEmbeddingBagCollection], kjts: list[list[KeyedJaggedTensor]], steps: int
) -> list[tuple[float, float]]:
    """Per module, (median wall s, minimum process-CPU s) of a step; the modules run
    interleaved (one step each per round) so load bursts hit them alike; the first round is
    a warm-up."""
    wall: list[list[float]] = [[] for _ in modules]
    cpu: list[list[float]] = [[] for _ in modules]
    for i in range(steps + 1):
        for j, module in enumerate(modules):
            kjt = kjts[j][i % len(kjts[j])]
            start, start_cpu = time.perf_counter(), time.process_time()
            module(kjt).values().sum().backward()
            if i:
                wall[j].append(time.perf_counter() - start)
                cpu[j].append(time.process_time() - start_cpu)
    return [(statistics.median(w), min(c)) for w, c in zip(wall, cpu, strict=True)]


def training(
    tables: int,
    capacity: int,
    dim: int,
    batch: int,
    bag: int,
    steps: int,
    occupancies: list[float] | None = None,
) -> None:
    print(
        f"\n## training step: {tables} tables x capacity {capacity} x dim {dim}, batch {batch}, "
        f"{bag} ids per bag, fused EXACT_ROWWISE_ADAGRAD, LRU, median of {steps} steps"
    )
    print(
        "resident: Zipf(1.05) over the ids already in the table (occupancy x capacity of them); "
        "the static table reads the same rows. stream: Zipf(1.05) over 2^40 ids, new ids evict."
    )
    print(
        "| ids | occupancy (start -> end) | new ids / table / step | dynamic ms (wall / cpu) | "
        "static ms (wall / cpu) | ratio (wall / cpu) |"
    )
    print("|---|---|---|---|---|---|")
    floors: list[tuple[float, float, float, float, float, int]] = []
    resident = 1.0
    for occupancy in occupancies or [0.5, 0.95]:
        filled = int(capacity * occupancy)
        for mode, pool in (("resident", filled), ("stream", 1 << 40)):
            pairs = batches(min(steps, 8), tables, batch, bag, capacity, pool, seed=1)
            static = collection(tables, capacity, dim, dynamic=False)
            dyn = collection(tables, capacity, dim, dynamic=True)
            prefill(dyn, filled)
            before = dyn.dynamic_tables.stats()["t0"]
            (dw, dc), (sw, sc) = step_times(
                [dyn, static], [[r for r, _ in pairs], [m for _, m in pairs]], steps
            )
            after = dyn.dynamic_tables.stats()["t0"]
            steps_run = max(1, after["steps"] - before["steps"])
            new = (after["admissions"] - before["admissions"]) / steps_run
            print(
                f"| {mode} | {before['occupancy'] / capacity:.0%} -> "
                f"{after['occupancy'] / capacity:.0%} | {new:.0f} | {1e3 * dw:.1f} / "
                f"{1e3 * dc:.1f} | {1e3 * sw:.1f} / {1e3 * sc:.1f} | {dw / sw:.2f} / "
                f"{dc / sc:.2f} |",
                flush=True,
            )
            if mode == "resident":
                resident = dc / sc
            elif new >= 1:
                buckets = dyn.dynamic_tables.table("t0").map.num_buckets
                floors.append((occupancy, new, 1e3 * sc, dc / sc, resident, buckets))
    for occupancy, new, static_ms, ratio, resident, buckets in floors:
        floor = stream_floor(tables, capacity, dim, buckets, round(new), repeats=5)
        print(
            f"\n## stream floor at {occupancy:.0%}: {new:.0f} new ids per table per step; per "
            f"new id {len(FLOOR_LINES)} random lines ({'; '.join(FLOOR_LINES)}) and {4 * dim} "
            f"bytes of freed row written: {64 * len(FLOOR_LINES) + 4 * dim} bytes of memory "
            "traffic a new id (64-byte lines)"
        )
        print(
            "| floor ms / step (cpu) | static ms (cpu) | least ratio: 1 + floor / static | "
            "with the map's cost: resident ratio + floor / static | measured stream ratio |"
        )
        print("|---|---|---|---|---|")
        print(
            f"| {floor:.1f} | {static_ms:.1f} | {1 + floor / static_ms:.2f} | "
            f"{resident + floor / static_ms:.2f} | {ratio:.2f} |",
            flush=True,
        )


FLOOR_LINES = (
    "the new id's bucket (probe miss, then its insertion: one line)",
    "the victim's old id's bucket (its erasure)",
    "the victim's policy metadata, co-located (its choice and update: one line)",
    "the freed row's optimizer state (rowwise: one line)",
)
"""The random cache lines any raw-id table must touch per new id in a full table, beyond the
lookup itself, plus `dim` floats of the freed row written (`stream_floor`)."""


def stream_floor(
    tables: int, capacity: int, dim: int, buckets: int, new_ids: int, repeats: int
) -> float:
    """Least process-CPU ms of the memory work any implementation of the stream regime does
    per step for `new_ids` new ids per table, beyond a static step: `FLOOR_LINES` as random
    8-byte reads (torch gathers from arrays of the real sizes: a map and a co-located
    metadata array per table) and a scalar fill of the optimizer-state entries, plus the
    freed rows' bytes written at memset speed (`new_ids x dim` floats zeroed contiguously: no
    initializer arithmetic, no scatter). Caches flushed before each run."""
    gen = torch.Generator().manual_seed(0)
    maps = [torch.zeros(buckets * 2, dtype=torch.int64) for _ in range(tables)]
    metas = [torch.zeros(capacity * 4, dtype=torch.int64) for _ in range(tables)]
    states = [torch.zeros(capacity) for _ in range(tables)]
    rows = [torch.ones(new_ids, dim) for _ in range(tables)]
    slots = [torch.randperm(capacity, generator=gen)[:new_ids] for _ in range(tables)]
    probes = [torch.randint(0, buckets * 2, (2 * new_ids,), generator=gen) for _ in range(tables)]
    flush = torch.zeros(16 << 20)

    def work() -> None:
        for t in range(tables):
            maps[t].index_select(0, probes[t])
            metas[t].index_select(0, slots[t] * 4)
            states[t].index_fill_(0, slots[t], 0.0)
            rows[t].zero_()

    times = []
    for _ in range(repeats):
        flush.add_(1)
        times.append(_best(work, 1))
    return 1e3 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--skip-map", action="store_true", help="only the training step")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per case")
    parser.add_argument(
        "--occupancy", type=float, nargs="+", default=[0.5, 0.95], help="pre-fill fractions"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(machine())
    print("note: re-measure on a quiet machine; a loaded one gives noise, not numbers")
    if args.quick:
        if not args.skip_map:
            map_throughput(log2_buckets=14, queries=1 << 15, repeats=2)
            reset_rows(capacity=5_000, dim=16, rows=1_000, repeats=2)
        training(tables=2, capacity=5_000, dim=16, batch=128, bag=5, steps=4)
    else:
        if not args.skip_map:
            map_throughput(log2_buckets=23, queries=1 << 22, repeats=5)
            reset_rows(capacity=100_000, dim=64, rows=23_500, repeats=9)
        training(
            tables=8,
            capacity=100_000,
            dim=64,
            batch=2048,
            bag=20,
            steps=args.steps,
            occupancies=args.occupancy,
        )


if __name__ == "__main__":
    main()
