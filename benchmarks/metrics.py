"""Metrics: update + compute time of shardrec_metrics vs TorchRec 1.8 (one process).

Shapes: N samples in batches of B; AUC lifetime over all N, NE/accuracy sums.
`--quick` runs a small shape once.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from shardrec_metrics import AUC, NE, Accuracy


def _data(n: int, b: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(n, generator=gen)
    y = (torch.rand(n, generator=gen) < p).float()
    w = torch.ones(n)
    return [(p[i : i + b], y[i : i + b], w[i : i + b]) for i in range(0, n, b)]


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ours(cls, batches, n):
    def run():
        m = cls(window_size=n)
        for p, y, w in batches:
            m.update(predictions=p, labels=y, weights=w)
        m.compute()

    return run


def theirs(name, batches, n, b):
    from torchrec.metrics.accuracy import AccuracyMetric
    from torchrec.metrics.auc import AUCMetric
    from torchrec.metrics.metrics_config import RecTaskInfo
    from torchrec.metrics.ne import NEMetric

    cls = {"auc": AUCMetric, "ne": NEMetric, "accuracy": AccuracyMetric}[name]
    task = RecTaskInfo(name="t", label_name="l", prediction_name="p", weight_name="w")

    def run():
        m = cls(world_size=1, my_rank=0, batch_size=b, tasks=[task], window_size=n)
        for p, y, w in batches:
            m.update(predictions={"t": p}, labels={"t": y}, weights={"t": w})
        m.compute()

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    args = ap.parse_args()
    if args.threads:
        # On a loaded machine, intra-op threads wait for each other's time slices (measured here:
        # a 8192-element log 18 us on 1 thread, 6-24 ms on 2); 1 thread gives stable numbers.
        torch.set_num_threads(args.threads)
    n, b, repeats = (20_000, 2048, 1) if args.quick else (1_000_000, 8192, 5)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} intra-op threads"
    )
    print(
        f"shape: {n} samples in batches of {b}, update all then compute once; median of {repeats}"
    )
    batches = _data(n, b)
    try:
        import torchrec.metrics.auc  # noqa: F401

        have_torchrec = True
    except Exception as exc:  # torchrec is optional here
        have_torchrec = False
        print(f"TorchRec column skipped: {exc!r}")
    print(f"{'metric':10} {'ours (s)':>10} {'torchrec (s)':>13} {'ratio':>7}")
    for name, cls in (("auc", AUC), ("ne", NE), ("accuracy", Accuracy)):
        t_ours = _time(ours(cls, batches, n), repeats)
        if have_torchrec:
            t_ref = _time(theirs(name, batches, n, b), repeats)
            print(f"{name:10} {t_ours:10.4f} {t_ref:13.4f} {t_ref / t_ours:6.2f}x")
        else:
            print(f"{name:10} {t_ours:10.4f} {'-':>13} {'-':>7}")
    per_rank = 20_000 if args.quick else 1_000_000
    res = dist_compute(2, per_rank)
    print(f"compute() on 2 gloo ranks, {per_rank} samples per rank, window 100k (median of 3):")
    for name, t in res.items():
        print(f"  {name:8} {t:.4f} s")


def _dist_worker(rank: int, world: int, port: int, n: int, q) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    gen = torch.Generator().manual_seed(rank)
    p = torch.rand(n, generator=gen)
    y = (torch.rand(n, generator=gen) < p).float()
    out = {}
    for name, cls in (("auc", AUC), ("ne", NE)):
        m = cls(window_size=100_000)
        m.update(predictions=p, labels=y)
        times = []
        for _ in range(3):
            dist.barrier()
            t0 = time.perf_counter()
            m.compute()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def dist_compute(world: int, n: int) -> dict[str, float]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_dist_worker, args=(r, world, port, n, q)) for r in range(world)]
    for p in procs:
        p.start()
    out = q.get()
    for p in procs:
        p.join()
    return out


if __name__ == "__main__":
    main()
