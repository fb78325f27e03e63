"""Quantized pooled all-to-all (shardrec_collectives.qcomm) vs the exact one, 2 gloo ranks (CPU).

Run: ``.venv/bin/python benchmarks/qcomm.py`` (``--quick`` for a smoke run;
``--mode reduce_scatter`` for row_wise's output dist instead, below). Two spawned ranks
(shardrec_testing.RankPool) time the pooled all-to-all of the sharded benchmark's table-wise
output (26 tables of dim 64, 13 per rank, batch B per rank), forward and backward (the reverse
exchange of a gradient of the same size), for each precision pair in alternation with the exact
exchange: median over repeats of the mean per step, as seen by rank 0, one intra-op thread per
rank. Also prints the bytes each rank sends per direction and the largest error of the decoded
rows against the exact ones. Reports only; asserts nothing (docs/bench/qcomm.md).

``--mode reduce_scatter``: the output dist of the same 26 tables sharded row_wise: every rank's
partial sums `(2 B, 26 x 64)` reduce-scattered (`reduce_scatter_pooled(..., codecs)`: each
rank's chunk encoded, sent, decoded and summed in float32), backward the all-gather of the
gradient `(B, 26 x 64)`; exact vs bf16 and fp16 (the reduce-scatter's registry entry turns
fp8 / mx4 into fp16 / bf16, as TorchRec). Also prints rank 0's process CPU time per step.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv, pooled_all_to_all, reduce_scatter_pooled
from shardrec_collectives.qcomm import (
    CommType,
    QCommsConfig,
    QuantizedCommCodecs,
    get_qcomm_codecs,
)
from shardrec_testing import RankContext, RankPool

TABLES, DIM = 26, 64
BF16, FP16, FP8, INT8, MX4 = (CommType.BF16, CommType.FP16, CommType.FP8, CommType.INT8,
                              CommType.MX4)  # fmt: skip
CONFIGS: list[tuple[str, QCommsConfig | None]] = [
    ("fp32 (exact)", None),
    ("bf16 / bf16", QCommsConfig(forward_precision=BF16, backward_precision=BF16)),
    ("fp16 / fp16", QCommsConfig(forward_precision=FP16, backward_precision=FP16)),
    ("fp8 row 64 / fp8",
     QCommsConfig(forward_precision=FP8, backward_precision=FP8, fp8_quantize_dim=64)),
    ("int8 / int8", QCommsConfig(forward_precision=INT8, backward_precision=INT8)),
    ("mx4 / bf16", QCommsConfig(forward_precision=MX4, backward_precision=BF16)),
]  # fmt: skip
RS_CONFIGS = CONFIGS[:3]  # the reduce-scatter's: exact, bf16, fp16


def _step(
    env: ShardingEnv,
    local: torch.Tensor,
    grad: torch.Tensor,
    codecs: QuantizedCommCodecs | None,
    mode: str = "pooled",
) -> Callable[[], torch.Tensor]:
    batch = [local.shape[0] // env.world_size] * env.world_size
    dims = [local.shape[1]] * env.world_size

    def run() -> torch.Tensor:
        x = local.detach().requires_grad_(True)
        if mode == "reduce_scatter":
            out = reduce_scatter_pooled(env, x, batch, codecs).wait()
        else:
            out = pooled_all_to_all(env, x, batch, dims, codecs).wait()
        out.backward(grad)
        return out.detach()

    return run


def bench_rank(
    ctx: RankContext, batch: int, inner: int, repeats: int, mode: str = "pooled"
) -> list[tuple[str, int, float, float, float, float, float]]:
    torch.set_num_threads(1)
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    g = torch.Generator().manual_seed(ctx.rank)
    rs = mode == "reduce_scatter"
    width = TABLES * DIM if rs else TABLES // world * DIM
    local = torch.randn(batch * world, width, generator=g)
    grad = torch.randn(batch, width if rs else width * world, generator=g)
    exact_fn = _step(env, local, grad, None, mode)
    exact_out = exact_fn()
    rows = []
    for name, config in RS_CONFIGS if rs else CONFIGS:
        codecs = None if config is None else get_qcomm_codecs(config)
        fn = _step(env, local, grad, codecs, mode)
        err = float((fn() - exact_out).abs().max())
        sent = batch * width  # values this rank sends to the other rank per direction
        codec = None if codecs is None else codecs.forward
        wire = sent * 4
        if codec is not None:
            size = torch.empty((), dtype=codec.quantized_dtype).element_size()
            wire = codec.calc_quantized_size(sent, codec.create_context()) * size
        samples: dict[str, list[float]] = {"q": [], "x": [], "qc": [], "xc": []}
        for _ in range(2):
            fn(), exact_fn()
        for _ in range(repeats):
            for key, f in (("q", fn), ("x", exact_fn)):
                dist.barrier(group=ctx.pg)
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(inner):
                    f()
                samples[key].append((time.perf_counter() - start) / inner * 1e3)
                samples[key + "c"].append((time.process_time() - cpu) / inner * 1e3)
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows.append((name, wire, med["q"], med["x"], err, med["qc"], med["xc"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small batch, few repeats")
    parser.add_argument(
        "--mode",
        choices=["pooled", "reduce_scatter"],
        default="pooled",
        help="the pooled all-to-all (table_wise) or the reduce-scatter (row_wise)",
    )
    args = parser.parse_args()
    batch, inner, repeats = (128, 2, 3) if args.quick else (1024, 10, 7)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    what = (
        "row_wise reduce-scatter"
        if args.mode == "reduce_scatter"
        else "table-wise pooled all-to-all"
    )
    print(
        f"shapes: 2 gloo ranks, {TABLES} tables of dim {DIM}, batch {batch}/rank; {what} "
        "forward + backward, 1 thread per rank"
    )
    with RankPool(2, timeout_s=900) as pool:
        results = pool.run(bench_rank, batch, inner, repeats, args.mode)[0]
    print(
        f"{'forward / backward':<20}{'sent (MB)':>10}{'quantized (ms)':>16}{'exact (ms)':>12}"
        f"{'speedup':>9}{'max |err|':>11}{'cpu q / x (ms)':>18}"
    )
    for name, wire, q_ms, x_ms, err, q_cpu, x_cpu in results:
        print(
            f"{name:<20}{wire / 1e6:>10.2f}{q_ms:>16.2f}{x_ms:>12.2f}{x_ms / q_ms:>8.2f}x"
            f"{err:>11.2e}{q_cpu:>9.2f} / {x_cpu:.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
