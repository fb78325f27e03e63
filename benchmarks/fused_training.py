"""One fused training step (forward + backward with the optimizer applied in backward).

Run: ``.venv/bin/python benchmarks/fused_training.py`` (``--quick`` for a smoke run,
``--profile`` for a per-phase breakdown of our backward). Shape from issue 4: 8 tables x 100k
rows x dim 64, batch 2048, 20 ids per bag, uniform ids. Prints the machine, the median step
time per optimizer for shardrec's FusedEmbeddingBagCollection and TorchRec 1.8's (fbgemm TBE on
CPU) when importable, the ratio, and the floor: bytes a step must move over the measured copy
bandwidth. Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from _bandwidth import copy_bandwidth_gbs  # benchmarks/_bandwidth.py

from shardrec_embedding.configs import EmbeddingBagConfig
from shardrec_embedding.fused import KERNELS, FusedEmbeddingBagCollection
from shardrec_embedding.fused.kernels import native_backward_unsupported
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec, fbgemm_kernels, state_shapes

OPTIMIZERS = [
    # (ours, TorchRec optimizer class name in torch.optim / torchrec.optim, its kwargs)
    (FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.01), "SGD", {"lr": 0.01}),
    (
        FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01),
        "RowWiseAdagrad",
        {"lr": 0.01},
    ),
    (
        FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.01),
        "Adagrad",
        {"lr": 0.01},
    ),
    (FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.001), "Adam", {"lr": 0.001}),
    (FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM, learning_rate=0.001), None, {}),
    (FusedOptimSpec(optimizer=EmbOptimType.LAMB, learning_rate=0.001), None, {}),
    (FusedOptimSpec(optimizer=EmbOptimType.LARS_SGD, learning_rate=0.01), None, {}),
]


def tables(num_tables: int, rows: int, dim: int) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=rows, embedding_dim=dim, feature_names=[f"f{i}"]
        )
        for i in range(num_tables)
    ]


class Batch(NamedTuple):
    """One KJT's fields (keys, values, lengths), shared by our module and TorchRec's."""

    keys: list[str]
    values: torch.Tensor
    lengths: torch.Tensor


def batches(num_tables: int, rows: int, batch: int, ids_per_bag: int, count: int) -> list[Batch]:
    gen = torch.Generator().manual_seed(0)
    out: list[Batch] = []
    for _ in range(count):
        lengths = torch.full((num_tables * batch,), ids_per_bag, dtype=torch.int64)
        values = torch.randint(0, rows, (num_tables * batch * ids_per_bag,), generator=gen)
        out.append(Batch([f"f{i}" for i in range(num_tables)], values, lengths))
    return out


def interleaved_ms(
    steps: dict[str, Callable[[int], None]], warmup: int, repeats: int
) -> dict[str, tuple[float, float]]:
    """Median wall-clock ms and *minimum* process-CPU ms per step of each contender.

    The contenders run in turns (one step each per round), so a burst of load from other jobs
    hits all of them alike. On a machine shared with other jobs the minimum CPU time is the
    steadiest number (it excludes time spent descheduled); the wall time is what a quiet
    machine would see."""
    for i in range(warmup):
        for step in steps.values():
            step(i)
    wall: dict[str, list[float]] = {k: [] for k in steps}
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    for i in range(repeats):
        for name, step in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            step(warmup + i)
            wall[name].append((time.perf_counter() - start) * 1e3)
            cpu[name].append((time.process_time() - start_cpu) * 1e3)
    return {k: (statistics.median(wall[k]), min(cpu[k])) for k in steps}


def _cell(times: dict[str, tuple[float, float]], key: str) -> str:
    return f"{times[key][0]:7.1f}/{times[key][1]:7.1f}" if key in times else "-"


def floor_bytes(spec: FusedOptimSpec, n_ids: int, unique: int, dim: int, batch_bags: int) -> int:
    """Forward reads every looked-up row; backward reads the output gradient once, then reads
    and writes each touched row and its optimizer state once."""
    row = dim * 4
    state = sum(
        (s[1] if len(s) == 2 else 1) * 4 for s in state_shapes(spec.optimizer, 1, dim).values()
    )
    return n_ids * row + batch_bags * row + unique * 2 * (row + state)


def ours_step(
    spec: FusedOptimSpec,
    cfgs: list[EmbeddingBagConfig],
    data: list[Batch],
    grad: torch.Tensor,
    *,
    hide: tuple[str, ...] = (),
) -> Callable[[int], None]:
    """One step of our module. `hide` takes backends out of the backward: "native" (the path
    before the native kernels, or without a C compiler), "fbgemm" (without fbgemm-gpu-cpu)."""
    model = FusedEmbeddingBagCollection(cfgs, spec, check_ids=True)
    kjts = [KeyedJaggedTensor(keys=d.keys, values=d.values, lengths=d.lengths) for d in data]

    def step(i: int) -> None:
        # The kernel table is read at call time: take backends out for this step only (the
        # forward too: with "native" hidden it takes the per-group lookup, not the segment one).
        saved = dict(KERNELS)
        for name in hide:
            KERNELS.pop(name, None)
        try:
            model(kjts[i % len(kjts)]).values().backward(grad)
        finally:
            KERNELS.update(saved)

    return step


def torchrec_step(
    cls_name: str,
    kwargs: dict[str, float],
    num_tables: int,
    rows: int,
    dim: int,
    data: list[Batch],
    grad: torch.Tensor,
) -> Callable[[int], None] | str:
    try:
        import torchrec
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection as TrFused
        from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    except Exception as exc:
        return f"torchrec not importable ({type(exc).__name__})"
    cls = RowWiseAdagrad if cls_name == "RowWiseAdagrad" else getattr(torch.optim, cls_name)
    cfgs = [
        torchrec.EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=rows, embedding_dim=dim, feature_names=[f"f{i}"]
        )
        for i in range(num_tables)
    ]
    try:
        model = TrFused(cfgs, optimizer_type=cls, optimizer_kwargs=dict(kwargs))
        kjts = [
            torchrec.KeyedJaggedTensor(keys=d.keys, values=d.values, lengths=d.lengths)
            for d in data
        ]
        model(kjts[0]).values().backward(grad)
    except Exception as exc:
        return f"fails on CPU ({type(exc).__name__}: {str(exc).splitlines()[0][:60]})"

    def step(i: int) -> None:
        out = model(kjts[i % len(kjts)]).values()
        out.backward(grad)

    return step


def profile(spec: FusedOptimSpec, step: Callable[[int], None]) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step(0)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            step(i + 1)
    events = {e.key: e for e in prof.key_averages()}
    print(f"  profile of {spec.optimizer.name} (ms per step, 3 steps):")
    for key in (
        "fused.native_backward",
        "fused.fbgemm_backward",
        "fused.torch_backward",
        "fused.sort_unique",
        "fused.segment_sum",
        "fused.optimizer_update",
        "aten::_embedding_bag_forward_only",
        "aten::embedding_bag",
        "aten::index_add_",
        "aten::index_select",
        "aten::sort",
    ):
        if key in events:
            print(f"    {key:40s} {events[key].cpu_time_total / 1e3 / 3:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--profile", action="store_true", help="per-phase breakdown of our step")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--only", default="", help="comma-separated optimizer names to run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    num_tables, rows, dim, batch, ids_per_bag = 8, 100_000, 64, 2048, 20
    warmup, repeats = 3, 11
    if args.quick:
        rows, batch, warmup, repeats = 10_000, 256, 1, 3
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"shape: {num_tables} tables x {rows} rows x dim {dim}, batch {batch}, "
        f"{ids_per_bag} ids/bag, uniform ids; median of {repeats} steps after {warmup} warmup"
    )
    data = batches(num_tables, rows, batch, ids_per_bag, count=4)
    grad = torch.randn(batch, num_tables * dim, generator=torch.Generator().manual_seed(1))
    n_ids = num_tables * batch * ids_per_bag
    per_table = data[0].values.view(num_tables, batch * ids_per_bag)
    unique = sum(int(torch.unique(v).numel()) for v in per_table.unbind(0))
    bandwidth = copy_bandwidth_gbs()
    print(
        f"copy bandwidth: {bandwidth:.1f} GB/s (read + write); ids/step {n_ids}, "
        f"unique rows {unique}; floor = bytes moved / copy bandwidth"
    )
    cfgs = tables(num_tables, rows, dim)
    print(
        "\nms per step (median wall / min process CPU), contenders interleaved; "
        "speedup = TorchRec wall / ours wall; no-native = our backward without the native "
        "kernels (fbgemm where it applies); torch-only = without native and fbgemm "
        "('-': that optimizer never uses them)"
    )
    print(
        f"{'optimizer':22s} {'shardrec':>15s} {'no-native':>15s} {'torch-only':>15s} "
        f"{'torchrec':>15s} {'speedup':>8s} {'floor':>6s} {'load':>5s}"
    )
    only = {o.strip().upper() for o in args.only.split(",") if o.strip()}
    for spec, tr_name, tr_kwargs in OPTIMIZERS:
        if only and not {spec.optimizer.name, spec.optimizer.value.upper()} & only:
            continue
        step = ours_step(spec, cfgs, data, grad)
        steps = {"ours": step}
        native = native_backward_unsupported(spec, grad, grad, None) is None
        fbgemm = fbgemm_kernels.fbgemm_applies(spec, grad, grad, None)
        if native and fbgemm:
            steps["no-native"] = ours_step(spec, cfgs, data, grad, hide=("native",))
        if native or fbgemm:
            steps["torch"] = ours_step(spec, cfgs, data, grad, hide=("native", "fbgemm"))
        ref: str = "no equivalent"
        if tr_name is not None:
            tr = torchrec_step(tr_name, tr_kwargs, num_tables, rows, dim, data, grad)
            if isinstance(tr, str):
                ref = tr
            else:
                steps["torchrec"] = tr
        times = interleaved_ms(steps, warmup, repeats)
        moved = floor_bytes(spec, n_ids, unique, dim, num_tables * batch)
        floor = moved / (bandwidth * 1e9) * 1e3
        cell = functools.partial(_cell, times)
        ratio = f"{times['torchrec'][0] / times['ours'][0]:7.2f}x" if "torchrec" in times else "-"
        note = "" if "torchrec" in times else f"  torchrec: {ref}"
        print(
            f"{spec.optimizer.name:22s} {cell('ours'):>15s} {cell('no-native'):>15s} "
            f"{cell('torch'):>15s} {cell('torchrec'):>15s} {ratio:>8s} {floor:6.1f} "
            f"{os.getloadavg()[0]:5.1f}{note}"
        )
        if args.profile:
            profile(spec, step)


if __name__ == "__main__":
    main()
