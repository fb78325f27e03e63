"""TorchRec-API metrics (shardrec.metrics.*) vs TorchRec 1.8: values and update+compute time.

One process, T tasks, N samples in batches of B, window W (global). For each metric and compute
mode it prints the largest absolute difference over every key of `compute()` and
`local_compute()`, and the median time of feeding all batches plus one compute. TorchRec is
imported only here (never by the packages); without it only our times are printed.
`--quick` runs a small shape once; `--threads 1` pins torch to one intra-op thread.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

METRICS = [
    "ne",
    "calibration",
    "ctr",
    "mse",
    "mae",
    "accuracy",
    "precision",
    "recall",
    "sum_weights",
    "num_positive_samples",
    "weighted_sum_predictions",
    "auc",
]
CLASS = {
    "ne": "NEMetric",
    "calibration": "CalibrationMetric",
    "ctr": "CTRMetric",
    "mse": "MSEMetric",
    "mae": "MAEMetric",
    "accuracy": "AccuracyMetric",
    "precision": "PrecisionMetric",
    "recall": "RecallMetric",
    "sum_weights": "SumWeightsMetric",
    "num_positive_samples": "NumPositiveSamplesMetric",
    "weighted_sum_predictions": "WeightedSumPredictionsMetric",
    "auc": "AUCMetric",
}
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _data(n: int, b: int, tasks: int) -> list[Batch]:
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(tasks, n, generator=gen, dtype=torch.double)
    y = (torch.rand(tasks, n, generator=gen, dtype=torch.double) < p).double()
    w = torch.rand(tasks, n, generator=gen, dtype=torch.double)
    return [(p[:, i : i + b], y[:, i : i + b], w[:, i : i + b]) for i in range(0, n, b)]


def _run(
    root: str, metric: str, mode: int, data: list[Batch], b: int, window: int
) -> Callable[[], dict[str, torch.Tensor]]:
    module = importlib.import_module(f"{root}.metrics.{metric}")
    config = importlib.import_module(f"{root}.metrics.metrics_config")
    tasks = [config.RecTaskInfo(name=f"t{i}") for i in range(data[0][0].shape[0])]

    def run() -> dict[str, torch.Tensor]:
        m = getattr(module, CLASS[metric])(
            world_size=1,
            my_rank=0,
            batch_size=b,
            tasks=tasks,
            compute_mode=config.RecComputeMode(mode),
            window_size=window,
        )
        for p, y, w in data:
            if mode == 2:
                names = [t.name for t in tasks]
                p, y, w = ({n: x[i] for i, n in enumerate(names)} for x in (p, y, w))
            m.update(predictions=p, labels=y, weights=w)
        return {**m.compute(), **m.local_compute()}

    return run


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, b, tasks, window, repeats = (
        (2_000, 100, 2, 1_000, 1) if args.quick else (200_000, 1_000, 3, 50_000, 5)
    )
    try:
        importlib.import_module("torchrec.metrics.ne")
        have_torchrec = True
    except ImportError:
        have_torchrec = False
    data = _data(n, b, tasks)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"torch {torch.__version__}"
    )
    print(
        f"shape: {tasks} tasks, N={n} samples, batches of {b}, window {window}; "
        f"TorchRec 1.8: {have_torchrec}"
    )
    print(
        f"{'metric':12} {'mode':>4} {'max |diff|':>11} {'ours ms':>9} {'torchrec ms':>12} "
        f"{'ratio':>6}"
    )
    for metric in METRICS:
        for mode in (1, 2):
            ours = _run("shardrec", metric, mode, data, b, window)
            ours_s = _median_s(ours, repeats)
            if not have_torchrec:
                print(f"{metric:12} {mode:>4} {'-':>11} {ours_s * 1e3:9.1f}")
                continue
            theirs = _run("torchrec", metric, mode, data, b, window)
            a, r = ours(), theirs()
            assert set(a) == set(r), sorted(set(a) ^ set(r))
            diff = max(float((a[k].double() - r[k].double()).abs().max()) for k in a)
            theirs_s = _median_s(theirs, repeats)
            print(
                f"{metric:12} {mode:>4} {diff:11.2e} {ours_s * 1e3:9.1f} {theirs_s * 1e3:12.1f} "
                f"{ours_s / theirs_s:6.2f}"
            )


if __name__ == "__main__":
    main()
