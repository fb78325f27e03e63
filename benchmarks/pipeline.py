"""TrainPipelineSparseDist against the plain training loop, on 2 gloo ranks (CPU).

    .venv/bin/python benchmarks/pipeline.py            # 26 tables x 100k rows x 64, batch 512
    .venv/bin/python benchmarks/pipeline.py --quick    # 8 tables x 1k rows x 16, batch 64
    .venv/bin/python benchmarks/pipeline.py --sharding table_wise --batch 1024

A DLRM-shaped model (26 row-wise sharded tables with fused Adagrad, a bottom MLP, an over arch)
trains the same batches with the plain loop (`model(batch)`, backward, step: the id
all-to-all of each batch waits inside its own forward) and with the pipeline (batch i+1's
all-to-all in flight while batch i computes). Each rank reports the median step time over
repeats; the table shows rank 0's wall and process CPU time per step (CPU: every thread of the
process, gloo's included), the ratio, the overlap gained (1 - pipelined / plain), and the time
rank 0 spends in the input dist per step: launching it (`input_dist(...)`) and waiting for it
(its `wait()`, which reads the exchange and builds the received KJT).

TorchRec's own pipeline is not run: it needs TorchRec's DistributedModelParallel with fbgemm's
CPU kernels on gloo, a different model stack, so its times would not isolate the overlap.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from typing import cast

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import Tensor, nn

from shardrec_collectives import Awaitable, ShardingEnv
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import CombinedOptimizer, KeyedOptimizerWrapper, in_backward_optimizer_filter
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shapes:
    tables: int
    rows: int
    dim: int
    batch: int
    pooling: int  # ids per bag (mean)
    dense_in: int = 13
    steps: int = 10
    repeats: int = 5
    sharding: str = "row_wise"


@dataclasses.dataclass
class Batch:
    dense_features: Tensor  # (B, dense_in)
    sparse_features: KeyedJaggedTensor  # tables keys, stride B
    labels: Tensor  # (B,)

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(
            self.dense_features.to(device, non_blocking=non_blocking),
            self.sparse_features.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
        )


class Dlrm(nn.Module):
    def __init__(self, s: Shapes) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name=f"t{i}",
                    num_embeddings=s.rows,
                    embedding_dim=s.dim,
                    feature_names=[f"f{i}"],
                )
                for i in range(s.tables)
            ],
            device="meta",
        )
        self.bottom = nn.Sequential(nn.Linear(s.dense_in, 128), nn.ReLU(), nn.Linear(128, s.dim))
        self.over = nn.Sequential(
            nn.Linear(s.dim * (s.tables + 1), 256), nn.ReLU(), nn.Linear(256, 1)
        )

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        pooled = self.sparse(batch.sparse_features).values()
        x = torch.cat([self.bottom(batch.dense_features), pooled], 1)
        logits = self.over(x).squeeze(1)
        return F.binary_cross_entropy_with_logits(logits, batch.labels), logits


def make_batches(s: Shapes, rank: int, n: int) -> list[Batch]:
    g = torch.Generator().manual_seed(rank)
    out = []
    for _ in range(n):
        lengths = torch.randint(0, 2 * s.pooling + 1, (s.tables * s.batch,), generator=g)
        values = torch.randint(0, s.rows, (int(lengths.sum()),), generator=g)
        kjt = KeyedJaggedTensor(
            [f"f{i}" for i in range(s.tables)], values, lengths=lengths, stride=s.batch
        )
        dense = torch.randn(s.batch, s.dense_in, generator=g)
        out.append(Batch(dense, kjt, torch.randint(0, 2, (s.batch,), generator=g).float()))
    return out


def build(s: Shapes, env: ShardingEnv) -> tuple[DistributedModelParallel, CombinedOptimizer]:
    torch.manual_seed(0)
    model = Dlrm(s)
    module_plan = construct_module_sharding_plan(
        model.sparse,
        {
            f"t{i}": row_wise() if s.sharding == "row_wise" else table_wise(rank=i % env.world_size)
            for i in range(s.tables)
        },
        world_size=env.world_size,
    )
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.05}
    )
    dmp = DistributedModelParallel(
        model, env=env, plan=ShardingPlan(plan={"sparse": module_plan}), sharders=[sharder]
    )
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        lambda p: torch.optim.SGD(p, lr=0.01),
    )
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense])


def plain_loop(
    model: DistributedModelParallel, opt: CombinedOptimizer, batches: list[Batch]
) -> None:
    for batch in batches:
        loss, _ = model(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()


def pipelined(
    model: DistributedModelParallel, opt: CombinedOptimizer, batches: list[Batch]
) -> None:
    pipeline = TrainPipelineSparseDist(model, opt, torch.device("cpu"))
    it = iter(batches)
    for _ in batches:
        pipeline.progress(it)


class InputDistClock:
    """Seconds spent launching input dists and waiting for them (wraps a module's input_dist)."""

    def __init__(self) -> None:
        self.launch = 0.0
        self.wait = 0.0

    def wrap(self, module: nn.Module) -> None:
        inner = cast(Callable[[KeyedJaggedTensor], Awaitable[object]], module.input_dist)

        def input_dist(features: KeyedJaggedTensor) -> Awaitable[object]:
            start = time.perf_counter()
            pending = inner(features)
            self.launch += time.perf_counter() - start

            def wait() -> object:
                start = time.perf_counter()
                got = pending.wait()
                self.wait += time.perf_counter() - start
                return got

            return Awaitable(wait)

        module.__dict__["input_dist"] = input_dist  # per-instance override for the benchmark


def worker(rank: int, world: int, port: int, s: Shapes, results: dict[str, list[float]]) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    env = ShardingEnv.from_process_group(dist.group.WORLD)  # type: ignore[arg-type]  # initialized just above
    model, opt = build(s, env)
    clock = InputDistClock()
    for sub in model.sharded_modules.values():
        clock.wrap(sub)
    batches = make_batches(s, rank, s.steps)
    plain_loop(model, opt, batches[:2])  # warm-up: allocations, first-call costs
    pipelined(model, opt, batches[:2])
    times: dict[str, list[float]] = {}
    for _ in range(s.repeats):
        for name, fn in (("plain", plain_loop), ("pipelined", pipelined)):
            dist.barrier()
            clock.launch = clock.wait = 0.0
            start, cpu = time.perf_counter(), time.process_time()
            fn(model, opt, batches)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            for key, value in (
                ("wall", wall),
                ("cpu", cpu),
                ("launch", clock.launch),
                ("wait", clock.wait),
            ):
                times.setdefault(f"{name} {key}", []).append(value / s.steps)
    if rank == 0:
        results.update(times)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, a smoke run")
    parser.add_argument("--sharding", choices=("row_wise", "table_wise"), default="row_wise")
    parser.add_argument("--batch", type=int, default=512, help="samples per rank and step")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        s = Shapes(tables=8, rows=1_000, dim=16, batch=64, pooling=4, steps=4, repeats=3)
    else:
        s = Shapes(
            tables=26, rows=100_000, dim=64, batch=args.batch, pooling=8, repeats=args.repeats
        )
    s = dataclasses.replace(s, sharding=args.sharding)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    try:
        load = os.getloadavg()
        print(f"load average (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    print(
        f"shapes: 2 gloo ranks, {s.tables} tables x {s.rows} rows x {s.dim} ({s.sharding}, fused "
        f"row-wise Adagrad), batch {s.batch}/rank, mean {s.pooling} ids/bag, {s.steps} steps "
        f"x {s.repeats} repeats (median)"
    )
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(2, free_port(), s, results), nprocs=2, join=True)  # type: ignore[attr-defined,no-untyped-call]  # untyped, not re-exported in torch stubs
        times = dict(results)

    def ms(key: str) -> float:
        return float(statistics.median(times[key])) * 1e3

    print("| loop | wall (ms/step) | CPU (ms/step) | input dist launch | input dist wait |")
    print("|---|---|---|---|---|")
    for name, label in (("plain", "plain loop"), ("pipelined", "TrainPipelineSparseDist")):
        print(
            f"| {label} | {ms(name + ' wall'):.2f} | {ms(name + ' cpu'):.2f} "
            f"| {ms(name + ' launch'):.2f} | {ms(name + ' wait'):.2f} |"
        )
    plain, piped = ms("plain wall"), ms("pipelined wall")
    print(f"ratio pipelined / plain: {piped / plain:.3f}; overlap gained: {1 - piped / plain:.1%}")
    print("TorchRec 1.8 pipeline: not run (see the module docstring)")


if __name__ == "__main__":
    main()
