"""Measure the bandwidths of the cost model on this machine, and save/load them as JSON.

Two numbers drive the cost model (docs/planner.md):
- lookup bandwidth: bytes of embedding rows a pooled lookup reads per second (torch's
  `embedding_bag`, sum pooling, random ids over a table larger than the CPU caches);
- collective bandwidth: bytes per second one rank sends in an `all_to_all_single` among `ranks`
  local gloo processes (the pattern of input and output distribution).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import socket
import statistics
import tempfile
import time

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

    def __post_init__(self) -> None:
        for field in ("lookup_bw", "intra_host_bw", "inter_host_bw"):
            value = getattr(self, field)
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
        missing = sorted(fields - set(data))
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


def calibrate(*, ranks: int = 2, quick: bool = False) -> Calibration:
    """Measure lookup and collective bandwidth on this machine (CPU, gloo).

    `quick` uses smaller tensors and fewer repeats (seconds instead of tens of seconds; noisier).
    One machine has no cross-host link, so inter_host_bw is recorded equal to intra_host_bw.
    """
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
    )
