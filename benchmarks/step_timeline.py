"""Where a DLRM step's collectives sit: rank 0's timeline of one step (2 gloo ranks, CPU).

    .venv/bin/python benchmarks/step_timeline.py                    # plain loop
    .venv/bin/python benchmarks/step_timeline.py --pipeline         # TrainPipelineSparseDist
    .venv/bin/python benchmarks/step_timeline.py --bucket-cap-mb 1  # smaller DDP buckets

The model, plan, batches and optimizers are `benchmarks/train_throughput.py`'s (ours only). For
the last `--steps` steps, rank 0 prints, in ms from the step's start: the main thread's autograd
nodes (torch.profiler, those over 0.3 ms), every all-to-all launched (`dist.all_to_all_single`,
wrapped here to stamp its launch and, from its future, its completion), every wait on one of our
collectives (`Pending.wait`: the time the main thread blocked), and every DDP bucket's
all-reduce (a comm hook equal to DDP's own: `allreduce_hook`, stamped likewise). A summary line
per step says how long the main thread blocked on collectives, and how much of the DDP
all-reduce's flight time was left when backward ended (the part DDP waited for).

The instrumentation costs a little (the profiler slows the step 1.5-2x); read the order and the
waits, not the step time (train_throughput.py times the step).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import train_throughput as tt
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function

from shardrec_collectives import _primitives
from shardrec_testing import free_port


@dataclasses.dataclass
class Span:
    what: str
    start: float  # ms, perf_counter
    end: float  # when the call returned
    done: float | None = None  # when the collective completed (its future), if one


SPANS: list[Span] = []


def _now() -> float:
    return time.perf_counter() * 1e3


def _stamp_done(span: Span, fut: torch.futures.Future[Any]) -> None:
    def done(f: torch.futures.Future[Any]) -> Any:
        span.done = _now()
        return f.value()

    # The chained future is dropped: the work itself stays tracked by our collectives.
    fut.then(done)


def instrument() -> None:
    """Wrap the all-to-all and our waits to stamp them (this process only)."""
    launch = dist.all_to_all_single

    def all_to_all_single(out: torch.Tensor, inp: torch.Tensor, *a: Any, **k: Any) -> Any:
        span = Span(f"all-to-all {inp.numel() * inp.element_size() / 1e6:.2f} MB", _now(), 0.0)
        work = launch(out, inp, *a, **k)
        span.end = _now()
        SPANS.append(span)
        if work is not None:
            _stamp_done(span, work.get_future())
        return work

    dist.all_to_all_single = all_to_all_single  # type: ignore[assignment]  # instrumentation
    wait = _primitives.Pending.wait

    def pending_wait(self: _primitives.Pending) -> torch.Tensor:
        start = _now()
        out = wait(self)
        SPANS.append(Span("wait (Pending.wait)", start, _now()))
        return out

    _primitives.Pending.wait = pending_wait  # type: ignore[method-assign]  # instrumentation


def ddp_hook(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP's own all-reduce (`allreduce_hook`), stamped."""
    start = _now()
    fut = default_hooks.allreduce_hook(state, bucket)
    size = bucket.buffer().numel() * bucket.buffer().element_size() / 1e6
    span = Span(f"DDP all-reduce, bucket {bucket.index()}, {size:.2f} MB", start, _now())
    SPANS.append(span)

    def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        span.done = _now()
        return f.value()

    return fut.then(done)


def run_rank(rank: int, cfg: tt.Config, port: int, args: argparse.Namespace) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=tt.WORLD)
    pg = dist.group.WORLD
    assert pg is not None
    instrument()
    model, opt, batches = tt.build_ours(
        cfg, pg, bucket_cap_mb=args.bucket_cap_mb, sharding=args.sharding
    )
    # A lambda: DDP checks the hook's annotations, which `from __future__` makes strings.
    ddp = model._dmp_wrapped_module
    assert isinstance(ddp, DistributedDataParallel)
    ddp.register_comm_hook(pg, lambda state, bucket: ddp_hook(state, bucket))
    if args.pipeline:
        step = tt.pipelined_step_fn("ours", model, opt, batches)
    else:
        step = tt.step_fn(model, opt, batches)
    for i in range(3):
        step(i, None)
    for i in range(args.steps):
        SPANS.clear()
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("timeline: align"):
                align = _now()
            t0 = _now()
            step(i, None)
            t1 = _now()
        if rank == 0:
            print_step(i, prof, align, t0, t1)
    dist.barrier()
    dist.destroy_process_group()


def print_step(i: int, prof: Any, align: float, t0: float, t1: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    mark = next(e for e in events if e["name"] == "timeline: align")
    offset = align - mark["ts"] / 1e3 - t0  # trace us -> ms from the step's start
    rows: list[tuple[float, float, str]] = []
    backward_end = 0.0  # the last autograd node's end (DDP's final wait comes after it)
    for e in events:
        name, start, dur = e["name"], e["ts"] / 1e3 + offset, e["dur"] / 1e3
        if e["tid"] != mark["tid"]:
            continue
        prefix = "autograd::engine::evaluate_function: "
        if name.startswith(prefix) and dur >= 0.3:
            backward_end = max(backward_end, start + dur)
            rows.append((start, start + dur, "backward " + name[len(prefix) :]))
        elif name in tt.PHASE_LABELS or name == "DistributedDataParallel.forward":
            rows.append((start, start + dur, name))
    blocked = 0.0
    ddp_left = 0.0
    for s in SPANS:
        done = "" if s.done is None else f", completed at {s.done - t0:.1f}"
        rows.append((s.start - t0, s.end - t0, f"  >> {s.what}{done}"))
        if s.what.startswith("wait"):
            blocked += s.end - s.start
        if s.what.startswith("DDP") and s.done is not None:
            ddp_left = max(ddp_left, s.done - t0 - backward_end)
    print(f"=== step {i}: {t1 - t0:.1f} ms wall (profiled), loadavg {tt._loadavg()}")
    print(f"{'start':>8} {'end':>8} {'ms':>7}  what")
    for start, end, what in sorted(rows):
        print(f"{start:8.1f} {end:8.1f} {end - start:7.1f}  {what}")
    print(
        f"summary: blocked in our collectives' waits {blocked:.1f} ms; DDP all-reduce still in "
        f"flight when the last backward node ended: {max(ddp_left, 0.0):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pipeline", action="store_true", help="TrainPipelineSparseDist")
    parser.add_argument("--steps", type=int, default=2, help="steps printed (after 3 warm-up)")
    parser.add_argument("--optimizer", choices=sorted(tt.OPTIMIZERS), default="adagrad")
    parser.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP bucket cap")
    parser.add_argument("--batch", type=int, default=2048, help="samples per rank and step")
    parser.add_argument("--sharding", choices=("table_wise", "row_wise"), default="table_wise")
    args = parser.parse_args()
    cfg = tt.Config(
        tables=26,
        rows=100_000,
        dim=64,
        batch=args.batch,
        ids=20,
        dense_arch=[512, 256, 64],
        over_arch=[512, 512, 256, 1],
        optimizer=args.optimizer,
        lr=0.01,
        warmup=3,
        repeats=args.steps,
        batches=3,
        threads=1,
        profile=False,
        skip_torchrec=True,
        pipeline=args.pipeline,
    )
    loop = "TrainPipelineSparseDist" if args.pipeline else "plain loop"
    print(f"loadavg before {tt._loadavg()}; {loop}, {args.sharding}, {args.optimizer}")
    mp.start_processes(
        run_rank, args=(cfg, free_port(), args), nprocs=tt.WORLD, join=True, start_method="spawn"
    )


if __name__ == "__main__":
    main()
