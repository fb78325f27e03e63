"""The fused optimizer update alone: native one-pass kernel vs fbgemm's CPU kernel vs the floor.

Run: ``.venv/bin/python benchmarks/optim_update.py`` (``--quick`` for a smoke run,
``--threads N``, ``--repeats N``, ``--torch`` adds the torch kernel). Two shapes (issue 28):

- ``world1``: the fused training step's group, 8 tables x 100k x 64 packed in one weight,
  batch 2048, 20 ids per bag (327,680 ids, uniform);
- ``sharded``: one rank's group of the sharded step (26 tables x 100k x 64, table_wise over
  2 ranks): 13 tables x 100k x 64, global batch 2048 (1024 per rank) x 10 ids (266,240 ids).

For SGD, rowwise Adagrad and Adagrad it times, interleaved (one update each per round, so load
bursts from other jobs hit all alike; a 96 MB write before each evicts the previous one's rows
from the caches), ``native`` (the one-pass kernel ``sr_fused_update``),
and ``fbgemm`` (fbgemm-gpu-cpu's ``split_embedding_backward_codegen_*_cpu``). Native SGD is the
scatter kernel (no sum per row needed; it measured faster than the one-pass kernel). Each cell:
median wall ms / minimum process-CPU ms. **floor** = bytes the update must
move / copy bandwidth (best of 7 copies of 256 MB): read the ids and the output gradient, read
and write each touched row and its state once. The floor ratios use the minimum CPU time (on a
loaded machine the wall medians mostly measure the load). The weight and an ``(R, D)`` state
are on 2 MB pages where the kernel grants them (``shardrec_embedding.memory.huge_pages``), as
the fused collections' packed tables are (since session 10; earlier runs used 4 KB pages).
Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from _bandwidth import copy_bandwidth_gbs  # benchmarks/_bandwidth.py

from shardrec_embedding._native.ops import native_available
from shardrec_embedding.fused.kernels import native_update
from shardrec_embedding.memory import huge_pages
from shardrec_optim import EmbOptimType, FusedOptimSpec, PooledGrad, fbgemm_kernels, init_state
from shardrec_optim.pooled import torch_update

SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.01),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.01),
]


class Shape(NamedTuple):
    name: str
    tables: int
    rows: int
    dim: int
    batch: int
    ids_per_bag: int


SHAPES = [
    Shape("world1", 8, 100_000, 64, 2048, 20),
    Shape("sharded", 13, 100_000, 64, 2048, 10),
]


class Batch(NamedTuple):
    ids: torch.Tensor
    offsets: torch.Tensor
    grad_out: torch.Tensor
    unique: int


def batches(shape: Shape, count: int) -> list[Batch]:
    """Group rows (table-local id + table offset), one bag per (table, sample)."""
    gen = torch.Generator().manual_seed(0)
    bags = shape.tables * shape.batch
    out = []
    for _ in range(count):
        local = torch.randint(0, shape.rows, (bags, shape.ids_per_bag), generator=gen)
        table = torch.arange(shape.tables).repeat_interleave(shape.batch).unsqueeze(1)
        ids = (local + table * shape.rows).reshape(-1)
        offsets = torch.arange(0, bags + 1, dtype=torch.int64) * shape.ids_per_bag
        grad_out = torch.randn(bags, shape.dim, generator=gen) * 1e-3
        out.append(Batch(ids, offsets, grad_out, int(torch.unique(ids).numel())))
    return out


def floor_bytes(spec: FusedOptimSpec, shape: Shape, batch: Batch) -> int:
    """Ids (8 B) and the output gradient read once; each touched row and its state read and
    written once."""
    state = {EmbOptimType.EXACT_SGD: 0, EmbOptimType.EXACT_ADAGRAD: shape.dim * 4}.get(
        spec.optimizer, 4
    )
    return (
        batch.ids.numel() * 8
        + batch.grad_out.numel() * 4
        + batch.unique * 2 * (shape.dim * 4 + state)
    )


_FLUSH_BYTES = 96 << 20  # three times the last-level cache of the development machine


def interleaved(
    contenders: dict[str, Callable[[int], None]], warmup: int, repeats: int
) -> dict[str, tuple[float, float]]:
    """Median wall ms and minimum process-CPU ms of each contender, run in turns."""
    for i in range(warmup):
        for run in contenders.values():
            run(i)
    wall: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    junk = torch.empty(_FLUSH_BYTES // 4)
    for i in range(repeats):
        for name, run in contenders.items():
            junk.fill_(i)  # evict the last contender's rows: each starts from a cold cache
            start, start_cpu = time.perf_counter(), time.process_time()
            run(warmup + i)
            wall[name].append((time.perf_counter() - start) * 1e3)
            cpu[name].append((time.process_time() - start_cpu) * 1e3)
    return {k: (statistics.median(wall[k]), min(cpu[k])) for k in contenders}


def contenders(
    spec: FusedOptimSpec, shape: Shape, data: list[Batch], with_torch: bool
) -> dict[str, Callable[[int], None]]:
    rows = shape.tables * shape.rows
    weight = torch.randn(rows, shape.dim) * 0.01
    state = init_state(spec.optimizer, rows, shape.dim)
    # as the fused collections' packed tables and their (R, D) state: 2 MB pages (session 10)
    for t in (weight, *state.values()):
        huge_pages(t)
    kernels: dict[str, Callable[[PooledGrad], None]] = {"native": native_update}
    if fbgemm_kernels.fbgemm_tbe_available():
        kernels["fbgemm"] = fbgemm_kernels.fbgemm_update
    if with_torch:
        kernels["torch"] = torch_update

    def run(kernel: Callable[[PooledGrad], None]) -> Callable[[int], None]:
        def step(i: int) -> None:
            b = data[i % len(data)]
            kernel(
                PooledGrad(
                    spec=spec, weight=weight, state=state, ids=b.ids, offsets=b.offsets,
                    per_sample_weights=None, mean=False, grad_out=b.grad_out,
                    learning_rate=spec.learning_rate, step=i + 1,
                )
            )  # fmt: skip

        return step

    return {name: run(kernel) for name, kernel in kernels.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--torch", action="store_true", help="also time the torch kernel")
    parser.add_argument("--only", default="", help="comma-separated shape names")
    parser.add_argument(
        "--bandwidth",
        type=float,
        default=0.0,
        help="copy GB/s for the floor (default: measured now; on a loaded machine that "
        "measures the share left to us, so pass a quiet run's figure to compare)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not native_available():
        raise SystemExit("the native kernels are unavailable here (see NativeUnavailableWarning)")
    shapes = SHAPES
    if args.only:
        shapes = [s for s in SHAPES if s.name in args.only.split(",")]
    repeats, warmup = (3, 1) if args.quick else (args.repeats, 3)
    if args.quick:
        shapes = [s._replace(rows=s.rows // 20, batch=s.batch // 8) for s in shapes]
    measured = copy_bandwidth_gbs()
    bandwidth = args.bandwidth or measured
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, threads {args.threads}, "
        f"copy bandwidth {measured:.1f} GB/s measured now, {bandwidth:.1f} used for the floor, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for shape in shapes:
        data = batches(shape, 4)
        print(
            f"\n{shape.name}: {shape.tables} tables x {shape.rows} x {shape.dim} in one weight, "
            f"{shape.tables * shape.batch} bags x {shape.ids_per_bag} ids = "
            f"{data[0].ids.numel()} ids, {data[0].unique} distinct rows; median wall / min CPU ms"
        )
        print(
            "| optimizer | native | fbgemm | torch | floor | fbgemm/native "
            "(wall, CPU) | native/floor | fbgemm/floor | load |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for spec in SPECS:
            times = interleaved(contenders(spec, shape, data, args.torch), warmup, repeats)
            floor = floor_bytes(spec, shape, data[0]) / bandwidth / 1e6

            def cell(name: str, times: dict[str, tuple[float, float]] = times) -> str:
                return f"{times[name][0]:.1f} / {times[name][1]:.1f}" if name in times else "-"

            nan = (float("nan"), float("nan"))
            nat, fb = times["native"], times.get("fbgemm", nan)
            # ratios on the minimum CPU time: under load the wall medians mostly measure it
            print(
                f"| {spec.optimizer.name} | {cell('native')} | {cell('fbgemm')} "
                f"| {cell('torch')} | {floor:.1f} | {fb[0] / nat[0]:.2f}x, {fb[1] / nat[1]:.2f}x "
                f"| {nat[1] / floor:.2f} | {fb[1] / floor:.2f} | {os.getloadavg()[0]:.1f} |"
            )


if __name__ == "__main__":
    main()
