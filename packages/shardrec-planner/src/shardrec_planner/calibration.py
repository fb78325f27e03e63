"""Measure the bandwidths of the cost model on this machine, and save/load them as JSON.

Two numbers drive the cost model (docs/planner.md):
- lookup bandwidth: bytes of embedding rows a pooled lookup reads per second (torch's
  `embedding_bag`, sum pooling, random ids over a table larger than the CPU caches);
- collective bandwidth: bytes per second one rank sends in an `all_to_all_single` among `ranks`
  local gloo processes (the pattern of input and output distribution).

Where asked (`disk_dir=`), the disk tier too: the bytes per second of row-sized positioned reads
at random offsets of a file in that directory (`os.pread` from a few threads, the tiered store's
pattern; the file's pages are dropped from the page cache first, so the reads reach the disk),
and the free bytes there (the disk a tiered table's store may use).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import shutil
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shardrec_collectives import ShardingEnv, timed_all_to_all

CALIBRATION_FORMAT = "shardrec-calibration/1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """Measured bandwidths in bytes per second, with where and when they were measured."""

    compute_device: str
    lookup_bw: float
    intra_host_bw: float
    inter_host_bw: float
    machine: str
    torch_version: str
    measured_at: str
    disk_bw: float | None = None
    """Bytes per second of random row-sized reads on the disk (None: not measured)."""
    disk_free_bytes: int | None = None
    """Free bytes in the measured directory's file system (None: not measured)."""

    def __post_init__(self) -> None:
        for field in ("lookup_bw", "intra_host_bw", "inter_host_bw", "disk_bw", "disk_free_bytes"):
            value = getattr(self, field)
            if value is None and field.startswith("disk"):
                continue
            if not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"calibration {field} must be a positive number, got {value!r}")

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        out = pathlib.Path(path)
        out.write_text(
            json.dumps({"format": CALIBRATION_FORMAT, **dataclasses.asdict(self)}, indent=1)
        )
        return out

    @staticmethod
    def load(path: str | pathlib.Path) -> Calibration:
        data = json.loads(pathlib.Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"{path}: not a shardrec calibration file ({CALIBRATION_FORMAT})")
        fields = {f.name for f in dataclasses.fields(Calibration)}
        required = {
            f.name for f in dataclasses.fields(Calibration) if f.default is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(f"{path}: calibration file lacks {missing}")
        return Calibration(**{k: v for k, v in data.items() if k in fields})


def measure_lookup_bandwidth(
    *, rows: int = 200_000, dim: int = 128, batch: int = 2048, pooling: int = 20, repeats: int = 7
) -> float:
    """Bytes of rows read per second by a sum-pooled `embedding_bag` over random ids (CPU)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(rows, dim, generator=gen)
    ids = torch.randint(0, rows, (batch * pooling,), generator=gen)
    offsets = torch.arange(0, batch * pooling, pooling)
    torch.nn.functional.embedding_bag(ids, weight, offsets, mode="sum")  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.nn.functional.embedding_bag(ids, weight, offsets, mode="sum")
        times.append(time.perf_counter() - start)
    return ids.numel() * dim * weight.element_size() / statistics.median(times)


def measure_disk_read_bandwidth(
    directory: str | pathlib.Path,
    *,
    file_bytes: int = 256 << 20,
    row_bytes: int = 260,
    reads: int = 20_000,
    threads: int = 4,
) -> float:
    """Bytes per second of `row_bytes` positioned reads at random row offsets of a
    `file_bytes` file written in `directory` (removed afterwards), from `threads` threads."""
    rows = max(1, file_bytes // row_bytes)
    gen = np.random.default_rng(0)
    offsets = gen.integers(0, rows, reads) * row_bytes
    with tempfile.TemporaryDirectory(dir=directory, prefix="shardrec-disk-") as tmp:
        path = os.path.join(tmp, "probe")
        chunk = os.urandom(1 << 20)
        with open(path, "wb") as f:
            for _ in range(max(1, file_bytes // len(chunk))):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):  # drop the pages just written from the cache
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

            def read(part: np.ndarray) -> None:
                for off in part.tolist():
                    os.pread(fd, row_bytes, off)

            start = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(read, np.array_split(offsets, threads)))
            seconds = time.perf_counter() - start
        finally:
            os.close(fd)
    return reads * row_bytes / seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _all_to_all_worker(
    rank: int, world: int, port: int, nbytes: int, repeats: int, out: str
) -> None:
    # The rendezvous address is an argument (tcp:// init), not environment variables: this
    # process is a measurement worker, not an entry point.
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        pg = dist.group.WORLD
        assert isinstance(pg, dist.ProcessGroup)
        env = ShardingEnv.from_process_group(pg, device="cpu")
        n = max(world, nbytes // 4 // world * world)
        times = timed_all_to_all(env, n, repeats)
        if rank == 0:
            sent = n * 4 * (world - 1) / world
            pathlib.Path(out).write_text(str(sent / statistics.median(times)))
    finally:
        dist.destroy_process_group()


def measure_collective_bandwidth(
    *, ranks: int = 2, nbytes: int = 16 * 1024 * 1024, repeats: int = 7
) -> float:
    """Bytes per second one rank sends in an all_to_all_single among `ranks` local gloo ranks."""
    if ranks < 2:
        raise ValueError(f"measuring a collective needs ranks >= 2, got {ranks}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bw")
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch helper
            _all_to_all_worker,
            args=(ranks, _free_port(), nbytes, repeats, out),
            nprocs=ranks,
            join=True,
        )
        return float(pathlib.Path(out).read_text())


def calibrate(
    *, ranks: int = 2, quick: bool = False, disk_dir: str | pathlib.Path | None = None
) -> Calibration:
    """Measure lookup and collective bandwidth on this machine (CPU, gloo), and with
    `disk_dir` the disk tier there (random row reads, free bytes).

    `quick` uses smaller tensors and fewer repeats (seconds instead of tens of seconds; noisier).
    One machine has no cross-host link, so inter_host_bw is recorded equal to intra_host_bw.
    """
    disk_bw: float | None = None
    disk_free: int | None = None
    if disk_dir is not None:
        disk_bw = measure_disk_read_bandwidth(
            disk_dir,
            file_bytes=(32 << 20) if quick else (256 << 20),
            reads=2_000 if quick else 20_000,
        )
        disk_free = shutil.disk_usage(disk_dir).free
    if quick:
        lookup = measure_lookup_bandwidth(rows=50_000, batch=512, repeats=3)
        coll = measure_collective_bandwidth(ranks=ranks, nbytes=2 * 1024 * 1024, repeats=3)
    else:
        lookup = measure_lookup_bandwidth()
        coll = measure_collective_bandwidth(ranks=ranks)
    return Calibration(
        compute_device="cpu",
        lookup_bw=lookup,
        intra_host_bw=coll,
        inter_host_bw=coll,
        machine=f"{platform.platform()} ({os.cpu_count()} cpus)",
        torch_version=torch.__version__,
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        disk_bw=disk_bw,
        disk_free_bytes=disk_free,
    )
