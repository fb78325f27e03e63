"""Raw-id store (shardrec-kvstore) against the dense-id flat file: batched reads and writes.

One table's rows (dim 64 + rowwise Adagrad state: 65 float32, 260 bytes) in each store:

    flat file    FlatFileStore: row i at a fixed offset, positioned I/O from a thread pool
    RocksDB      RocksRowStore: key = 8-byte raw id, one multi-get / one write batch per call

Per batch of `--batch` distinct ids, uniform over the `--rows` stored ones (a cache's misses
and its write-back), after a flush (reads come from table files, not the memtable): rows per
second for fill (sequential ids), random get, random put (overwrite: the write-back), and for
RocksDB a get of ids it never held (a new id's miss: answered by the bloom filters) and a
random get with `mmap_reads=True` (a second store with the same rows); and the
share of a RocksDB call spent making Python keys (`encode_keys`). The page cache is warm (the
data set fits in RAM): this measures the stores' own cost, not the disk. Then the raw-id
tiered table's training step (`RawIdTieredEmbeddingBag`, Zipf(1.05) raw ids over 2^40, cache
of 10% of the ids) against the dense tiered table on the same ids pre-mapped to rows.

`--quick`: small shapes, seconds. Numbers need a quiet machine (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.fused import FusedTableSpec
from shardrec_kvstore import RocksRowStore, RowLayout, encode_keys
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_tiered import (
    FlatFileStore,
    RawIdTieredEmbeddingBag,
    StoreLayout,
    TieredFusedEmbeddingBag,
    TieredOptions,
)

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)


def rate(fn: Callable[[int], None], calls: int, per_call: int) -> float:
    """Rows per second of `calls` calls of `per_call` rows (median call time)."""
    times = []
    for i in range(calls):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return per_call / float(np.median(times))


def stores(args: argparse.Namespace, root: str) -> None:
    dim = args.dim
    flat = FlatFileStore(
        os.path.join(root, "flat"),
        StoreLayout(table="t", num_rows=args.rows, dim=dim, state=(("momentum1", 1),)),
    )
    rocks = RocksRowStore(
        os.path.join(root, "rocks"), RowLayout(table="t", dim=dim, state=(("momentum1", 1),))
    )
    stride = dim + 1
    rng = np.random.default_rng(0)
    b = args.batch
    fill_rows = rng.standard_normal((b, stride)).astype(np.float32)
    results: dict[str, dict[str, float]] = {"flat file": {}, "RocksDB": {}}
    fills = args.rows // b
    results["flat file"]["fill"] = rate(
        lambda i: flat.write(np.arange(i * b, (i + 1) * b, dtype=np.int64), fill_rows), fills, b
    )
    results["RocksDB"]["fill"] = rate(
        lambda i: rocks.put(np.arange(i * b, (i + 1) * b, dtype=np.int64), fill_rows), fills, b
    )
    flat.flush()
    rocks.flush()
    batches = [
        np.sort(rng.choice(fills * b, size=b, replace=False)).astype(np.int64)
        for _ in range(args.calls)
    ]
    results["flat file"]["random get"] = rate(lambda i: flat.read(batches[i]), args.calls, b)
    results["RocksDB"]["random get"] = rate(lambda i: rocks.get(batches[i]), args.calls, b)
    results["flat file"]["random put"] = rate(
        lambda i: flat.write(batches[i], fill_rows), args.calls, b
    )
    results["RocksDB"]["random put"] = rate(
        lambda i: rocks.put(batches[i], fill_rows), args.calls, b
    )
    rocks.flush()
    absent = [ids - (1 << 62) for ids in batches]
    results["RocksDB"]["get, never held"] = rate(lambda i: rocks.get(absent[i]), args.calls, b)
    keys = rate(lambda i: encode_keys(batches[i]), args.calls, b)
    mapped = RocksRowStore(
        os.path.join(root, "rocks-mmap"),
        RowLayout(table="t", dim=dim, state=(("momentum1", 1),)),
        mmap_reads=True,
    )
    for i in range(fills):
        mapped.put(np.arange(i * b, (i + 1) * b, dtype=np.int64), fill_rows)
    mapped.flush()
    results["RocksDB"]["random get, mmap reads"] = rate(
        lambda i: mapped.get(batches[i]), args.calls, b
    )
    mapped.close()
    print(f"\nstores: {fills * b} rows of {stride * 4} bytes, batches of {b} distinct ids")
    print(f"  {'':22s} {'flat file':>14s} {'RocksDB':>14s} {'ratio':>7s}   (rows/s)")
    for what in ("fill", "random get", "random put", "get, never held", "random get, mmap reads"):
        f = results["flat file"].get(what)
        r = results["RocksDB"][what]
        ratio = f"{f / r:6.1f}x" if f else "      -"
        print(f"  {what:22s} {f or float('nan'):14,.0f} {r:14,.0f} {ratio}")
    got = results["RocksDB"]["random get"]
    print(f"  making keys: {keys:,.0f} ids/s ({got / keys:.0%} of a RocksDB get's time)")
    rows_mb = fills * b * stride * 4 / 1e6
    print(f"  RocksDB on disk: {rocks.disk_bytes() / 1e6:.1f} MB for {rows_mb:.1f} MB of rows")
    rocks.close()
    flat.close()


def zipf_raw(rng: np.random.Generator, n: int, distinct: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, distinct + 1) ** 1.05
    cdf = np.cumsum(weights / weights.sum())
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), distinct - 1)
    return ranks.astype(np.int64)


def tables(args: argparse.Namespace, root: str) -> None:
    rng = np.random.default_rng(1)
    raw_of_rank = rng.integers(-(2**40), 2**40, args.ids)
    batches = [zipf_raw(rng, args.batch * 20, args.ids) for _ in range(args.steps + 2)]
    cache = max(args.ids // 10, 2 * max(np.unique(r).size for r in batches))
    offsets = torch.arange(0, args.batch * 20 + 1, 20)

    def step(module: torch.nn.Module, ids: torch.Tensor) -> float:
        start = time.perf_counter()
        module(ids, offsets).sum().backward()
        return time.perf_counter() - start

    dense = TieredFusedEmbeddingBag(
        [FusedTableSpec(name="t", num_rows=args.ids, dim=args.dim)],
        SPEC,
        TieredOptions(store_dir=os.path.join(root, "dense"), cache_rows=cache),
    )
    raw = RawIdTieredEmbeddingBag(
        EmbeddingBagConfig(
            name="t", num_embeddings=args.ids, embedding_dim=args.dim, feature_names=["f"]
        ),
        SPEC,
        TieredOptions(cache_rows=cache),
        lambda layout: RocksRowStore(
            os.path.join(root, "raw"),
            RowLayout(table=layout.table, dim=layout.dim, state=layout.state),
        ),
    )
    times: dict[str, list[float]] = {"dense": [], "raw": []}
    for i, ranks in enumerate(batches):
        d = step(dense, torch.from_numpy(ranks))
        r = step(raw, torch.from_numpy(raw_of_rank[ranks]))
        if i >= 2:
            times["dense"].append(d)
            times["raw"].append(r)
    md, mr = (1e3 * float(np.median(times[k])) for k in ("dense", "raw"))
    hits = raw.stats()["t"]
    rate_ = hits["hits"] / max(1, hits["hits"] + hits["misses"])
    print(
        f"\ntraining step: 1 table, {args.ids} distinct ids (Zipf 1.05), dim {args.dim}, "
        f"batch {args.batch} x 20 ids, rowwise Adagrad, cache {cache} rows"
    )
    print(f"  dense ids, flat file       {md:8.2f} ms/step")
    print(f"  raw ids, RocksDB           {mr:8.2f} ms/step  {mr / md:5.2f}x  hit rate {rate_:.1%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--ids", type=int, default=200_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--store", default=None, help="store directory (default: a temporary one)")
    args = p.parse_args()
    if args.quick:
        args.rows, args.batch, args.calls, args.ids, args.steps = 50_000, 512, 10, 20_000, 5
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}")
    with tempfile.TemporaryDirectory(dir=args.store) as root:
        stores(args, root)
        tables(args, root)


if __name__ == "__main__":
    main()
