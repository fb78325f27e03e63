"""What checksum verification costs on a ~1 GB checkpoint, and which checksum to use.

Run: ``.venv/bin/python benchmarks/checkpoint_verify.py`` (``--size-gb 0.05`` for a smoke run,
``--dir`` to put the checkpoint on another file system). One gloo rank saves a
DistributedModelParallel of embedding tables (fp32, dim 128, fused SGD: no optimizer state)
with `shardrec_dmp.save`, then times, median over ``--repeats``:

- save: the whole save, including the CRC-32 of every file it wrote;
- verify: `shardrec_dmp.verify` (every file read and checksummed, one process);
- load: `shardrec_dmp.load` (verification, then DCP's read into the model);
- load, unverified: the same load with the manifest's checksums removed (what load cost
  before checksums existed), the reference the ratio compares against;

and the throughput of candidate checksums over the largest data file (stdlib only; xxhash
when installed). Files are in the page cache after the save (warm numbers: the CPU cost of
checksumming; from cold storage, verification adds one more read of every file). Reports
only; asserts nothing. Does not need TorchRec.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save, verify
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder

DIM, TABLES = 128, 4
CHUNK = 8 << 20


class Tables(nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name=f"t{i}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f"f{i}"]
                )
                for i in range(TABLES)
            ]
        )


def _model(rows: int, env: ShardingEnv) -> DistributedModelParallel:
    model = Tables(rows)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_sgd", "learning_rate": 0.01}
    )
    gens = {f"t{i}": table_wise(rank=0) for i in range(TABLES)}
    plan = construct_module_sharding_plan(model.sparse, gens, world_size=1, sharder=sharder)
    return DistributedModelParallel(
        model, env=env, plan=ShardingPlan(plan={"sparse": plan}), sharders=[sharder]
    )


def _median(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _stream(path: str, update: Callable[[memoryview], object]) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            update(view[:n])


def _checksums() -> dict[str, Callable[[str], object]]:
    def crc(fn: Callable[[memoryview, int], int], start: int) -> Callable[[str], object]:
        def run(path: str) -> int:
            value = start

            def update(chunk: memoryview) -> None:
                nonlocal value
                value = fn(chunk, value)

            _stream(path, update)
            return value

        return run

    def hashed(name: str) -> Callable[[str], object]:
        def run(path: str) -> str:
            h = hashlib.new(name)
            _stream(path, h.update)
            return h.hexdigest()

        return run

    out: dict[str, Callable[[str], object]] = {
        "zlib.crc32 (chosen)": crc(zlib.crc32, 0),
        "zlib.adler32": crc(zlib.adler32, 1),
    }
    for name in ("sha256", "blake2b", "sha1", "md5"):
        out[f"hashlib.{name}"] = hashed(name)
    try:
        import xxhash  # type: ignore[import-not-found]  # optional, for comparison only

        def xx(path: str) -> str:
            h = xxhash.xxh3_64()
            _stream(path, h.update)
            return str(h.hexdigest())

        out["xxhash.xxh3_64"] = xx
    except ImportError:
        pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0, help="checkpoint size (default 1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*DTensor", category=FutureWarning)
    rows = max(1, int(args.size_gb * 2**30 / (TABLES * DIM * 4)))
    root = tempfile.mkdtemp(prefix="ckpt-verify-", dir=args.dir)
    path = os.path.join(root, "ck")
    dist.init_process_group("gloo", init_method=f"file://{root}/store", rank=0, world_size=1)
    try:
        env = ShardingEnv.from_process_group(dist.group.WORLD)
        dmp = _model(rows, env)
        t_save = _median(lambda: save(path, dmp), args.repeats)
        manifest_file = os.path.join(path, "shardrec.json")
        with open(manifest_file) as f:
            manifest = json.load(f)
        files = manifest["files"]
        size = sum(r["bytes"] for r in files.values())
        t_verify = _median(lambda: verify(path), args.repeats)
        t_load = _median(lambda: load(path, dmp), args.repeats)
        unverified = {k: v for k, v in manifest.items() if k != "files"}
        with open(manifest_file, "w") as f:
            json.dump(unverified, f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_plain = _median(lambda: load(path, dmp), args.repeats)
        with open(manifest_file, "w") as f:
            json.dump(manifest, f)
        largest = max(files, key=lambda n: files[n]["bytes"])
        big = os.path.join(path, largest)
        rates = {
            name: files[largest]["bytes"] / _median(lambda fn=fn: fn(big), args.repeats)
            for name, fn in _checksums().items()
        }
    finally:
        dist.destroy_process_group()
        shutil.rmtree(root, ignore_errors=True)

    mb = size / 1e6
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"storage {args.dir or tempfile.gettempdir()}"
    )
    print(
        f"checkpoint: {TABLES} tables x {rows} rows x dim {DIM} fp32, {len(files)} files, "
        f"{mb:.0f} MB; median of {args.repeats}; warm page cache"
    )
    print(f"{'step':<28}{'seconds':>10}{'MB/s':>10}")
    for name, secs in [
        ("save (with checksums)", t_save),
        ("verify", t_verify),
        ("load (verify + read)", t_load),
        ("load, unverified", t_plain),
    ]:
        print(f"{name:<28}{secs:>10.3f}{mb / secs:>10.0f}")
    print(f"ratio verify / unverified load: {t_verify / t_plain:.2f}")
    print(f"ratio load / unverified load:   {t_load / t_plain:.2f}")
    print(f"checksums over {largest} ({files[largest]['bytes'] / 1e6:.0f} MB):")
    for name, rate in rates.items():
        print(f"  {name:<24}{rate / 1e6:>8.0f} MB/s")


if __name__ == "__main__":
    main()
