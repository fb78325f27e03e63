"""GPU lookups at FBGEMM's TBE benchmark shape, and a DLRM training step on one GPU.

Run: ``.venv/bin/python benchmarks/gpu.py`` (``--quick``: fewer repeats, batch 512 only).
Without CUDA it prints one line saying so and exits 0. ``--device cpu`` runs the same code at
tiny shapes on CPU (a smoke test of the script; set ``TRITON_INTERPRET=1`` to include the
Triton path), not a measurement.

Shape (FBGEMM's ``split_table_batched_embeddings_benchmark``): 32 tables x 100k rows x dim
128, bag size 20, uniform ids, batch 512 and 65,536, fp32 and fp16 weights. The 32 tables are
one packed group, so each path is one kernel launch per step. For each (batch, dtype) and each
path (torch-native `embedding_bag` / our Triton kernels):

- forward: median time, effective bandwidth = (rows read + output written) / time;
- backward with fused rowwise Adagrad (sort, segment sums, row updates; given the output
  gradient): median time, bandwidth by FBGEMM's convention (twice the forward's bytes) / time,
  and forward + backward;

next to the measured device-to-device copy bandwidth (`dst.copy_(src)` of 1 GiB, bytes read
+ written). Targets (issue 10): forward >= 75% of the copy bandwidth at batch 65,536; backward
>= 30%. Then a DLRM-style model (26 tables x 100k x 128, fused rowwise Adagrad, dot
interaction) trained through DistributedModelParallel + TrainPipelineSparseDist on a one-rank
NCCL group: samples/s. Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused.lookup import fused_update
from shardrec_embedding.triton import backward_unsupported, pooled_embedding_bag
from shardrec_optim import EmbOptimType, FusedOptimSpec, init_state

TABLES, ROWS, DIM, BAG = 32, 100_000, 128, 20
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)


def timer(device: torch.device) -> Callable[[Callable[[], object], int, int], float]:
    """`measure(fn, warmup, repeats)` -> median ms (CUDA events on a GPU)."""

    def measure(fn: Callable[[], object], warmup: int, repeats: int) -> float:
        for _ in range(warmup):
            fn()
        times: list[float] = []
        for _ in range(repeats):
            if device.type == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()  # type: ignore[no-untyped-call]
                fn()
                end.record()  # type: ignore[no-untyped-call]
                end.synchronize()  # type: ignore[no-untyped-call]
                times.append(start.elapsed_time(end))  # type: ignore[no-untyped-call]
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return measure


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read + written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timer(device)(lambda: dst.copy_(src), 3, repeats)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def lookup_rows(
    device: torch.device, batch: int, dtype: torch.dtype, tables: int, rows: int, dim: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Packed weight `(tables * rows, dim)`, group ids, offsets and an output gradient."""
    gen = torch.Generator(device=device).manual_seed(0)
    weight = (torch.rand(tables * rows, dim, device=device, generator=gen) * 0.02).to(dtype)
    table_of_bag = torch.arange(tables, device=device).repeat_interleave(batch)
    ids = torch.randint(0, rows, (tables * batch, BAG), device=device, generator=gen)
    ids = (ids + (table_of_bag * rows).unsqueeze(1)).reshape(-1)
    offsets = torch.arange(0, tables * batch * BAG + 1, BAG, device=device)
    grad_out = torch.randn(tables * batch, dim, device=device, generator=gen).to(dtype)
    return weight, ids, offsets, grad_out


def torch_forward(weight: Tensor, ids: Tensor, offsets: Tensor) -> Tensor:
    out: Tensor = torch.ops.aten._embedding_bag_forward_only(
        weight, ids, offsets, False, 0, False, None, True, -1
    )[0]
    return out


def triton_forward(weight: Tensor, ids: Tensor, offsets: Tensor) -> Tensor:
    return pooled_embedding_bag(weight, ids, offsets)


Forward = Callable[[Tensor, Tensor, Tensor], Tensor]


def lookup_case(
    device: torch.device,
    batch: int,
    dtype: torch.dtype,
    shape: tuple[int, int, int],
    paths: list[tuple[str, Forward]],
    reps: tuple[int, int],
    copy_gbs: float,
) -> None:
    """One (batch, dtype) row per path: forward, backward with fused rowwise Adagrad."""
    measure = timer(device)
    tables, rows, dim = shape
    weight, ids, offsets, grad_out = lookup_rows(device, batch, dtype, tables, rows, dim)
    size = weight.element_size()
    fwd_bytes = tables * batch * BAG * dim * size + tables * batch * dim * size
    for name, forward in paths:
        state = init_state(SPEC.optimizer, weight.shape[0], dim, device=device)
        fwd_ms = measure(functools.partial(forward, weight, ids, offsets), *reps)
        backward = functools.partial(
            fused_update, weight, state, SPEC, ids, offsets, None, PoolingType.SUM, grad_out,
            SPEC.learning_rate, 1, backend=name,
        )  # fmt: skip
        bwd_ms = measure(backward, *reps)
        fwd_gbs = fwd_bytes / (fwd_ms * 1e-3) / 1e9
        bwd_gbs = 2 * fwd_bytes / (bwd_ms * 1e-3) / 1e9
        print(
            f"{batch:>7} {str(dtype)[6:]:>8} {name:>7} | {fwd_ms:>8.3f} {fwd_gbs:>9.1f} "
            f"{100 * fwd_gbs / copy_gbs:>6.1f}% | {bwd_ms:>8.3f} {bwd_gbs:>9.1f} "
            f"{100 * bwd_gbs / copy_gbs:>6.1f}% | {fwd_ms + bwd_ms:>10.3f}"
        )


def lookup_table(args: argparse.Namespace, device: torch.device, copy_gbs: float) -> None:
    shape = (TABLES, ROWS, DIM) if device.type == "cuda" else (4, 1000, 16)
    batches = [512] if args.quick else [512, 65_536]
    if device.type == "cpu":
        batches = [8]
    reps = (2, 5) if args.quick else (5, 25)
    paths: list[tuple[str, Forward]] = [("torch", torch_forward)]
    why_not = backward_unsupported(SPEC, torch.empty(1, shape[2], device=device))
    if why_not is None:
        paths.append(("triton", triton_forward))
    else:
        print(f"(Triton path skipped: {why_not})")
    print(
        f"{'batch':>7} {'dtype':>8} {'path':>7} | {'fwd ms':>8} {'fwd GB/s':>9} {'% copy':>7} | "
        f"{'bwd ms':>8} {'bwd GB/s':>9} {'% copy':>7} | {'fwd+bwd ms':>10}"
    )
    for batch in batches:
        for dtype in (torch.float32, torch.float16):
            lookup_case(device, batch, dtype, shape, paths, reps, copy_gbs)
            if device.type == "cuda":
                torch.cuda.empty_cache()


# -- DLRM training step -------------------------------------------------------------------------


class Dlrm(nn.Module):
    """Bottom MLP on dense features, pooled embeddings, pairwise dots, top MLP -> logit."""

    def __init__(self, ebc: nn.Module, num_tables: int, dim: int, device: torch.device) -> None:
        super().__init__()
        self.sparse = ebc
        self.bottom = nn.Sequential(
            nn.Linear(13, 512, device=device), nn.ReLU(), nn.Linear(512, dim, device=device)
        )
        pairs = (num_tables + 1) * num_tables // 2
        self.top = nn.Sequential(
            nn.Linear(dim + pairs, 1024, device=device),
            nn.ReLU(),
            nn.Linear(1024, 512, device=device),
            nn.ReLU(),
            nn.Linear(512, 1, device=device),
        )
        rows, cols = torch.triu_indices(num_tables + 1, num_tables + 1, offset=1, device=device)
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)

    def forward(self, batch: DlrmBatch) -> tuple[Tensor, Tensor]:
        dense = self.bottom(batch.dense_features)
        pooled = self.sparse(batch.sparse_features).values()
        stacked = torch.cat(
            [dense.unsqueeze(1), pooled.view(dense.shape[0], -1, dense.shape[1])], 1
        )
        dots = torch.bmm(stacked, stacked.transpose(1, 2))[:, self._rows, self._cols]
        logits = self.top(torch.cat([dense, dots], dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logits, batch.labels), logits


class DlrmBatch:
    def __init__(self, dense: Tensor, sparse: object, labels: Tensor) -> None:
        self.dense_features, self.sparse_features, self.labels = dense, sparse, labels

    def to(self, device: torch.device, non_blocking: bool = False) -> DlrmBatch:
        return DlrmBatch(
            self.dense_features.to(device, non_blocking=non_blocking),
            self.sparse_features.to(device, non_blocking=non_blocking),  # type: ignore[attr-defined]
            self.labels.to(device, non_blocking=non_blocking),
        )


def dlrm_samples_per_s(args: argparse.Namespace, device: torch.device) -> None:
    import torch.distributed as dist

    from shardrec_collectives import ShardingEnv
    from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist
    from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
    from shardrec_jagged import KeyedJaggedTensor
    from shardrec_optim import (
        CombinedOptimizer,
        KeyedOptimizerWrapper,
        in_backward_optimizer_filter,
    )
    from shardrec_sharding import EmbeddingBagCollectionSharder
    from shardrec_testing import free_port

    num_tables, rows, dim = (26, ROWS, DIM) if device.type == "cuda" else (4, 1000, 16)
    batch = 8192 if device.type == "cuda" else 64
    steps = 10 if args.quick else 50
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
        )
    configs = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=rows, embedding_dim=dim, feature_names=[f"f{i}"]
        )
        for i in range(num_tables)
    ]
    ebc = EmbeddingBagCollection(configs, device=torch.device("meta"))
    model = Dlrm(ebc, num_tables, dim, device)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.01}
    )
    env = ShardingEnv.from_process_group(dist.group.WORLD, device)  # type: ignore[arg-type]
    dmp = DistributedModelParallel(model, env=env, device=device, sharders=[sharder])
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    opt = CombinedOptimizer(
        [dmp.fused_optimizer, KeyedOptimizerWrapper(dense, lambda p: torch.optim.Adagrad(p))]
    )
    gen = torch.Generator().manual_seed(0)

    def make() -> DlrmBatch:
        lengths = torch.randint(0, 2 * BAG + 1, (num_tables * batch,), generator=gen)
        values = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
        keys = [f"f{i}" for i in range(num_tables)]
        kjt = KeyedJaggedTensor(keys, values, lengths=lengths, stride=batch)
        return DlrmBatch(
            torch.randn(batch, 13, generator=gen), kjt, torch.randint(0, 2, (batch,)).float()
        )

    host = [make() for _ in range(4)]

    def stream(n: int) -> Iterator[DlrmBatch]:
        for i in range(n):
            yield host[i % len(host)]

    pipe = TrainPipelineSparseDist(dmp, opt, device)
    it = stream(3 + steps)  # one iterator: the pipeline remembers that one ran dry
    for _ in range(3):
        pipe.progress(it)  # type: ignore[arg-type]
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        pipe.progress(it)  # type: ignore[arg-type]
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    print(
        f"DLRM ({num_tables} tables x {rows} x {dim}, batch {batch}, fused rowwise Adagrad, "
        f"DMP + TrainPipelineSparseDist, 1 rank {backend}): {steps * batch / elapsed:,.0f} "
        f"samples/s ({elapsed / steps * 1e3:.2f} ms/step, {steps} steps)"
    )
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, batch 512 only")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"benchmarks/gpu.py: no CUDA device on this machine ({platform.node()}, torch "
            f"{torch.__version__}); nothing measured. docs/bench/gpu.md lists the measurements "
            "that remain for a GPU session."
        )
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, device {name}, torch "
        f"{torch.__version__}, triton {_triton_version()}"
    )
    copy_bytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    copy_gbs = copy_bandwidth(device, copy_bytes, 5 if args.quick else 20)
    print(f"device-to-device copy bandwidth: {copy_gbs:.1f} GB/s (read + write)")
    print(
        f"TBE shape: {TABLES} tables x {ROWS} rows x dim {DIM}, bag {BAG}, uniform ids "
        "(CPU smoke run: 4 x 1000 x 16, batch 8)"
    )
    lookup_table(args, device, copy_gbs)
    dlrm_samples_per_s(args, device)
    return 0


def _triton_version() -> str:
    try:
        import triton  # type: ignore[import-not-found,import-untyped,unused-ignore]  # optional

        return str(triton.__version__)
    except ImportError:
        return "absent"


if __name__ == "__main__":
    sys.exit(main())
