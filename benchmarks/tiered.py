"""Tiered tables (issue 29): the same model and ids three ways, and the disk's random-read floor.

    in RAM       BatchedFusedEmbeddingBag (rows and state in memory)
    cache 10%    TieredFusedEmbeddingBag, cache of 10% of each table's rows
    cache 1%     the same with 1% (raised to two batches' distinct rows where 1% is fewer:
                 the batch in flight and the one prefetched)

Zipf(1.05) and uniform ids; fused rowwise Adagrad; the tiered runs prefetch batch i+1 after
batch i's forward on a background thread, so its disk reads overlap batch i's backward (the
loop below calls `prefetch` itself, as TrainPipelineSparseDist's prefetch stage does; the same
through DMP and the train pipelines: `tiered_pipeline.py`); "exposed" is the share of
the prefetch time the next forward still waited for. Prints ms per step, the ratio to in-RAM,
hit rates and the store's read bandwidth next to the disk floor: positioned random reads of
4 KiB (O_DIRECT where the file system allows it) and of one row, at queue depth 1 and 32
(threads).

Numbers need a quiet machine (docs/benchmarks.md). `--quick`: small shapes, seconds.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_tiered import TieredFusedEmbeddingBag, TieredOptions

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)


def zipf_ids(rng: np.random.Generator, n: int, rows: int, a: float) -> np.ndarray:
    """`n` ids in `[0, rows)` with P(rank k) ~ 1 / k^a, ranks scattered over the rows."""
    weights = 1.0 / np.arange(1, rows + 1) ** a
    cdf = np.cumsum(weights / weights.sum())
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), rows - 1)
    return (ranks * 2654435761) % rows  # a fixed permutation when rows is not a multiple


def make_batches(args: argparse.Namespace, dist: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(0)
    out = []
    per_table = args.batch * args.pooling
    for _ in range(args.steps + args.warmup):
        parts = []
        for t in range(args.tables):
            if dist == "zipf":
                ids = zipf_ids(rng, per_table, args.rows, 1.05)
            else:
                ids = rng.integers(0, args.rows, per_table)
            parts.append(ids + t * args.rows)
        ids = torch.from_numpy(np.concatenate(parts)).long()
        offsets = torch.arange(0, ids.numel() + 1, args.pooling, dtype=torch.int64)
        out.append((ids, offsets))
    return out


def run(module: torch.nn.Module, batches: list, warmup: int, prefetch: bool) -> float:
    """Median ms per step over the timed steps."""
    times = []
    for i, (ids, offsets) in enumerate(batches):
        start = time.perf_counter()
        if prefetch and i == 0:
            module.prefetch(ids)
        out = module(ids, offsets)
        if prefetch and i + 1 < len(batches):
            module.prefetch(batches[i + 1][0], background=True)
        out.sum().backward()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def specs(args: argparse.Namespace) -> list[FusedTableSpec]:
    return [
        FusedTableSpec(name=f"t{i}", num_rows=args.rows, dim=args.dim, init_range=(-0.01, 0.01))
        for i in range(args.tables)
    ]


def distinct_per_table(batches: list, args: argparse.Namespace) -> int:
    return max(
        int(ids[(ids >= t * args.rows) & (ids < (t + 1) * args.rows)].unique().numel())
        for ids, _ in batches
        for t in range(args.tables)
    )


def _read_at(fd: int, nbytes: int, offsets: list[int]) -> None:
    buf = mmap.mmap(-1, max(nbytes, 4096))  # page aligned, as O_DIRECT needs
    view = memoryview(buf)[:nbytes]
    for o in offsets:
        os.preadv(fd, [view], o)


def disk_floor(directory: str, row_bytes: int, quick: bool) -> dict[str, float]:
    """MB/s of random positioned reads: (4 KiB, row) x (queue depth 1, 32)."""
    size = (64 if quick else 1024) << 20
    path = os.path.join(directory, "floor.bin")
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    out = {}
    reads = 2000 if quick else 20000
    for label, nbytes in (("4 KiB", 4096), ("row", row_bytes)):
        direct = nbytes == 4096 and hasattr(os, "O_DIRECT")
        try:
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        except OSError:
            direct = False
            fd = os.open(path, os.O_RDONLY)
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        rng = np.random.default_rng(1)
        offsets = (rng.integers(0, size // nbytes - 1, reads) * nbytes).tolist()
        for depth in (1, 32):
            start = time.perf_counter()
            with ThreadPoolExecutor(depth) as pool:
                chunks = [offsets[i::depth] for i in range(depth)]
                list(pool.map(_read_at, [fd] * depth, [nbytes] * depth, chunks))
            secs = time.perf_counter() - start
            key = f"{label} qd{depth}{'' if direct else ' (buffered)'}"
            out[key] = reads * nbytes / secs / 1e6
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    os.remove(path)
    return out


def shape_arguments(p: argparse.ArgumentParser) -> None:
    """The issue's shapes as flags (this script's and tiered_pipeline.py's)."""
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tables", type=int, default=26)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--pooling", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    shape_arguments(p)
    p.add_argument("--store", default=None, help="store directory (default: a temporary one)")
    args = p.parse_args()
    if args.quick:
        args.tables, args.rows, args.batch, args.steps, args.warmup = 4, 20_000, 256, 5, 1
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}")
    print(
        f"shapes: {args.tables} tables x {args.rows} rows x dim {args.dim}, batch {args.batch}, "
        f"{args.pooling} id(s) per bag, rowwise Adagrad, {args.steps} timed steps"
    )
    with tempfile.TemporaryDirectory(dir=args.store) as root:
        row_bytes = 0
        for dist in ("zipf", "uniform"):
            batches = make_batches(args, dist)
            least = distinct_per_table(batches, args)
            ram = run(BatchedFusedEmbeddingBag(specs(args), SPEC), batches, args.warmup, False)
            print(f"\n{dist} ids (a batch touches up to {least} rows of a table)")
            print(f"  in RAM        {ram:8.2f} ms/step")
            for share in (0.10, 0.01):
                # With batch i+1 prefetched while batch i is held, two batches must fit.
                rows = max(round(share * args.rows), 2 * least)
                store = os.path.join(root, f"{dist}-{share}")
                opts = TieredOptions(store_dir=store, cache_rows=rows)
                module = TieredFusedEmbeddingBag(specs(args), SPEC, opts)
                row_bytes = module.caches[0].store.layout.row_bytes
                before = {k: dict(v) for k, v in module.stats().items()}
                ms = run(module, batches, args.warmup, True)
                stats = module.stats()
                hits = sum(s["hits"] - before[k]["hits"] for k, s in stats.items())
                misses = sum(s["misses"] - before[k]["misses"] for k, s in stats.items())
                read = sum(s["bytes_read"] - before[k]["bytes_read"] for k, s in stats.items())
                total_s = ms * len(batches) / 1e3
                raised = ", raised to 2 batches" if rows > round(share * args.rows) else ""
                rate = hits / max(1, hits + misses)
                first = next(iter(stats.values()))
                exposed = first["exposed_seconds"] / max(1e-9, first["prefetch_seconds"])
                print(
                    f"  cache {share:4.0%} ({rows} rows{raised}) {ms:8.2f} ms/step  "
                    f"{ms / ram:5.2f}x in-RAM  hit rate {rate:6.1%}  "
                    f"store read {read / total_s / 1e6:7.1f} MB/s  prefetch exposed {exposed:5.1%}"
                )
        print(f"\ndisk random-read floor (row = {row_bytes} bytes), MB/s:")
        for k, v in disk_floor(root, row_bytes, args.quick).items():
            print(f"  {k:24s} {v:9.1f}")


if __name__ == "__main__":
    main()
