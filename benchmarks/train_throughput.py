"""DLRM training throughput on 2 gloo ranks (CPU): shardrec vs TorchRec 1.8, table_wise.

Run: ``.venv/bin/python benchmarks/train_throughput.py`` (``--quick`` for a smoke run,
``--help`` for the shapes). Two processes (torch.multiprocessing spawn, gloo on 127.0.0.1, one
intra-op thread each) train DLRM on synthetic Criteo-shaped batches: 13 dense features, 26
sparse features with one table each (100k rows x dim 64 by default), bags of about 20 ids.
A step is forward, backward and optimizer step: the tables train with the fused exact row-wise
Adagrad (or SGD) in backward, the dense part with Adagrad (or SGD) after DDP's all-reduce.

Both libraries get the same model sizes, plan (tables alternate between ranks 0 and 1), batches
and optimizer settings:
- ours: ``shardrec_dmp.DistributedModelParallel`` over ``shardrec_models.DLRMTrain``;
- TorchRec: ``torchrec.distributed.DistributedModelParallel`` over
  ``torchrec.models.dlrm.DLRMTrain`` with ``EmbeddingBagCollectionSharder(fused_params=...)``
  (TorchRec on CPU runs only data_parallel, table_wise and column_wise, with its fused kernel).

Both models are built on ``meta`` and materialized by their DMP. Steps are timed on rank 0
after a barrier, ours and TorchRec's in alternation, median over repeats; samples/s counts
both ranks' samples. "CPU ms" is rank 0's process CPU time per step (median): the work done,
less sensitive than wall time to other jobs on a loaded machine. Each step is also split into
forward / backward / optimizer step, and the dense part alone is timed as a floor.
``--profile`` prints torch.profiler's top operators of a few steps of each library (rank 0)
and, in the plain loop, the last profiled step's wall time per phase (`step_phases`).
``--dense-precision bf16`` also times ours with the bf16 dense part (`DLRM.set_dense_precision`:
autocast, float32 master weights; a second model trained on the same batches) and the dense
part alone in bf16, beside the fp32 rows and TorchRec's (fp32: it has no such option), and
prints whether this CPU runs bfloat16 natively (avx512_bf16 / amx_bf16) or emulated.
``--bucket-cap-mb N`` also times ours with DDP buckets of N MiB (steps interleaved with the
default wrapper's single bucket) and checks that the weights stay bit-identical to it.
``--sharding row_wise`` shards every table row_wise in ours (TorchRec is then not run: its CPU
path has no row_wise).
Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import record_function

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DefaultDataParallelWrapper, DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_models import DLRM, DLRMTrain
from shardrec_optim import CombinedOptimizer, KeyedOptimizerWrapper, in_backward_optimizer_filter
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import free_port

WORLD = 2
NUM_DENSE = 13
EBC_PATH = "model.sparse_arch.embedding_bag_collection"
# Fused table optimizer name (ours), fbgemm's EmbOptimType member name, dense torch.optim class.
OPTIMIZERS = {
    "adagrad": ("exact_row_wise_adagrad", "EXACT_ROWWISE_ADAGRAD", torch.optim.Adagrad),
    "sgd": ("exact_sgd", "EXACT_SGD", torch.optim.SGD),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    tables: int
    rows: int
    dim: int
    batch: int
    ids: int
    dense_arch: list[int]
    over_arch: list[int]
    optimizer: str
    lr: float
    warmup: int
    repeats: int
    batches: int
    threads: int
    profile: bool
    skip_torchrec: bool
    pipeline: bool = False
    dense_precision: str = "fp32"
    bucket_cap_mb: float | None = None
    sharding: str = "table_wise"


@dataclasses.dataclass
class Batch:
    """What both DLRMTrain classes read: dense_features, sparse_features, labels."""

    dense_features: torch.Tensor
    sparse_features: Any
    labels: torch.Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        """What a train pipeline needs of a batch (ours: duck-typed)."""
        return Batch(
            self.dense_features.to(device, non_blocking=non_blocking),
            self.sparse_features.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
        )


@dataclasses.dataclass
class Timing:
    step_ms: list[float] = dataclasses.field(default_factory=list)
    fwd_ms: list[float] = dataclasses.field(default_factory=list)
    bwd_ms: list[float] = dataclasses.field(default_factory=list)
    opt_ms: list[float] = dataclasses.field(default_factory=list)
    cpu_ms: list[float] = dataclasses.field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {
            k: statistics.median(getattr(self, f"{k}_ms"))
            for k in ("step", "fwd", "bwd", "opt", "cpu")
        }


def feature_names(cfg: Config) -> list[str]:
    return [f"cat_{t}" for t in range(cfg.tables)]


def make_inputs(cfg: Config, rank: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """`cfg.batches` batches of this rank: dense `(B, 13)`, ids `(N,)`, lengths `(F * B,)`.

    Bags hold 1 .. 2 * ids - 1 ids (mean `ids`), ids uniform over the rows; the same tensors
    feed both libraries."""
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(cfg.batches):
        lengths = torch.randint(1, 2 * cfg.ids, (cfg.tables * cfg.batch,), generator=g)
        values = torch.randint(0, cfg.rows, (int(lengths.sum()),), generator=g)
        dense = torch.rand(cfg.batch, NUM_DENSE, generator=g)
        out.append((dense, values, lengths))
    return out


def labels_for(cfg: Config, rank: int, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(2000 + 100 * rank + i)
    return torch.randint(0, 2, (cfg.batch,), generator=g).float()


def _check_split(lib: str, fused: Any, dense: Any, cfg: Config, every_table: bool = False) -> None:
    """Every local table trains in backward (fused), no table in the dense optimizer."""
    fused_tables = [k for k in fused if "embedding_bags" in k]
    dense_tables = [k for k in dense if "embedding_bags" in k]
    # table i lives on rank i % WORLD (table_wise), or a block of every table on each rank
    local = cfg.tables if every_table else len(range(dist.get_rank(), cfg.tables, WORLD))
    if dense_tables or len(fused_tables) != local:
        raise RuntimeError(
            f"{lib}: tables not all fused on rank {dist.get_rank()}: fused {fused_tables}, "
            f"dense {dense_tables}"
        )


# -- ours --------------------------------------------------------------------------------------


def build_ours(
    cfg: Config,
    pg: dist.ProcessGroup,
    precision: str = "fp32",
    bucket_cap_mb: float | None = None,
    sharding: str = "table_wise",
) -> tuple[torch.nn.Module, Any, list[Batch]]:
    """Our DMP over DLRMTrain; `bucket_cap_mb`: DDP's bucket cap instead of the default
    wrapper's 25 MiB (the default wrapper's other settings kept); `sharding` "row_wise": every
    table row_wise instead (benchmarks/step_timeline.py; TorchRec's CPU path has no row_wise)."""
    fused_name, _, dense_cls = OPTIMIZERS[cfg.optimizer]
    tables = [
        EmbeddingBagConfig(
            name=f"t_{f}", num_embeddings=cfg.rows, embedding_dim=cfg.dim, feature_names=[f]
        )
        for f in feature_names(cfg)
    ]
    ebc = EmbeddingBagCollection(tables, device="meta")
    dlrm = DLRM(ebc, NUM_DENSE, cfg.dense_arch, cfg.over_arch, dense_device=torch.device("meta"))
    dlrm.set_dense_precision(precision)
    model = DLRMTrain(dlrm)
    module_plan = construct_module_sharding_plan(
        ebc,
        {
            t.name: row_wise() if sharding == "row_wise" else table_wise(rank=i % WORLD)
            for i, t in enumerate(tables)
        },
        world_size=WORLD,
    )
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": fused_name, "learning_rate": cfg.lr}
    )
    wrapper = None
    if bucket_cap_mb is not None:
        wrapper = DefaultDataParallelWrapper(
            static_graph=False,
            ddp_kwargs={
                "gradient_as_bucket_view": True,
                "broadcast_buffers": True,
                "bucket_cap_mb": bucket_cap_mb,
            },
        )
    dmp = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(pg),
        plan=ShardingPlan(plan={EBC_PATH: module_plan}),
        sharders=[sharder],
        data_parallel_wrapper=wrapper,
    )
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        lambda params: dense_cls(params, lr=cfg.lr),
    )
    opt = CombinedOptimizer([dmp.fused_optimizer, dense])
    _check_split(
        "ours", dmp.fused_optimizer.params, dense.params, cfg, every_table=sharding == "row_wise"
    )
    rank = dist.get_rank(pg)
    batches = [
        Batch(d, KeyedJaggedTensor(feature_names(cfg), v, lengths=n), labels_for(cfg, rank, i))
        for i, (d, v, n) in enumerate(make_inputs(cfg, rank))
    ]
    return dmp, opt, batches


# -- TorchRec ----------------------------------------------------------------------------------


def build_torchrec(cfg: Config, pg: dist.ProcessGroup) -> tuple[torch.nn.Module, Any, list[Batch]]:
    import torchrec
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed import DistributedModelParallel as TrcDMP
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder as TrcSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan as trc_plan
    from torchrec.distributed.sharding_plan import table_wise as trc_tw
    from torchrec.distributed.types import ShardingEnv as TrcEnv
    from torchrec.distributed.types import ShardingPlan as TrcPlan
    from torchrec.models.dlrm import DLRM as TrcDLRM
    from torchrec.models.dlrm import DLRMTrain as TrcDLRMTrain
    from torchrec.optim.keyed import CombinedOptimizer as TrcCombined
    from torchrec.optim.keyed import KeyedOptimizerWrapper as TrcWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter as trc_filter

    _, fbgemm_name, dense_cls = OPTIMIZERS[cfg.optimizer]
    tables = [
        torchrec.EmbeddingBagConfig(
            name=f"t_{f}", num_embeddings=cfg.rows, embedding_dim=cfg.dim, feature_names=[f]
        )
        for f in feature_names(cfg)
    ]
    meta = torch.device("meta")
    ebc = torchrec.EmbeddingBagCollection(tables=tables, device=meta)
    model = TrcDLRMTrain(TrcDLRM(ebc, NUM_DENSE, cfg.dense_arch, cfg.over_arch, dense_device=meta))
    sharder = TrcSharder(
        fused_params={"optimizer": getattr(EmbOptimType, fbgemm_name), "learning_rate": cfg.lr}
    )
    module_plan = trc_plan(
        ebc,
        # The fused kernel by name: without it (and without apply_optimizer_in_backward on the
        # weights) TorchRec's plan helpers pick the DENSE kernel, whose tables get dense
        # gradients and would be trained by the dense optimizer.
        {t.name: trc_tw(rank=i % WORLD, compute_kernel="fused") for i, t in enumerate(tables)},
        local_size=WORLD,
        world_size=WORLD,
        device_type="cpu",
        sharder=sharder,
    )
    dmp = TrcDMP(
        model,
        env=TrcEnv.from_process_group(pg),
        device=torch.device("cpu"),
        plan=TrcPlan(plan={EBC_PATH: module_plan}),
        sharders=[sharder],
    )
    dense = TrcWrapper(
        dict(trc_filter(dmp.named_parameters())), lambda params: dense_cls(params, lr=cfg.lr)
    )
    opt = TrcCombined([dmp.fused_optimizer, dense])
    _check_split("TorchRec", dmp.fused_optimizer.params, dense.params, cfg)
    rank = dist.get_rank(pg)
    batches = [
        Batch(
            d,
            torchrec.KeyedJaggedTensor(keys=feature_names(cfg), values=v, lengths=n),
            labels_for(cfg, rank, i),
        )
        for i, (d, v, n) in enumerate(make_inputs(cfg, rank))
    ]
    return dmp, opt, batches


# -- timing ------------------------------------------------------------------------------------


StepFn = Callable[[int, "Timing | None"], None]


def step_fn(model: torch.nn.Module, opt: Any, batches: list[Batch]) -> StepFn:
    """One training step on batch `i` (cycled), its phases appended to `timing` when given."""

    def step(i: int, timing: Timing | None) -> None:
        # The labels mark the phases in a profile (`--profile`'s phase table).
        t0 = time.perf_counter()
        with record_function(PHASE_LABELS[0]):
            opt.zero_grad()
        with record_function(PHASE_LABELS[1]):
            loss, _ = model(batches[i % len(batches)])
        t1 = time.perf_counter()
        with record_function(PHASE_LABELS[2]):
            loss.backward()
        t2 = time.perf_counter()
        with record_function(PHASE_LABELS[3]):
            opt.step()
        t3 = time.perf_counter()
        if timing is not None:
            timing.fwd_ms.append((t1 - t0) * 1e3)
            timing.bwd_ms.append((t2 - t1) * 1e3)
            timing.opt_ms.append((t3 - t2) * 1e3)

    return step


def pipelined_step_fn(lib: str, model: torch.nn.Module, opt: Any, batches: list[Batch]) -> StepFn:
    """One `progress()` of the library's own `TrainPipelineSparseDist` over the batches,
    cycled (batch i+1's id all-to-all in flight while batch i computes). The phases are not
    separable there: forward / backward / optimizer step are reported as 0."""
    cpu = torch.device("cpu")
    if lib == "ours":
        from shardrec_dmp import TrainPipelineSparseDist

        pipeline: Any = TrainPipelineSparseDist(model, opt, cpu)
        items: list[Any] = batches
    else:
        from torchrec.datasets.utils import Batch as TrcBatch
        from torchrec.distributed.train_pipeline import TrainPipelineSparseDist as TrcPipeline

        pipeline = TrcPipeline(model, opt, cpu)
        items = [TrcBatch(b.dense_features, b.sparse_features, b.labels) for b in batches]
    it = itertools.cycle(items)

    def step(i: int, timing: Timing | None) -> None:
        pipeline.progress(it)
        if timing is not None:
            timing.fwd_ms.append(0.0)
            timing.bwd_ms.append(0.0)
            timing.opt_ms.append(0.0)

    return step


def run_rank(rank: int, cfg: Config, port: int, queue: Any) -> None:
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.set_num_threads(cfg.threads)
        dist.init_process_group("gloo", rank=rank, world_size=WORLD)
        pg = dist.group.WORLD
        assert pg is not None
        libs: dict[str, StepFn] = {}
        notes: dict[str, str] = {}
        if cfg.bucket_cap_mb is not None:
            torch.manual_seed(0)  # the same initial weights in both of ours (checked after)
        model, opt, batches = build_ours(cfg, pg, sharding=cfg.sharding)
        make_step = functools.partial(pipelined_step_fn, "ours") if cfg.pipeline else step_fn
        libs["ours"] = make_step(model, opt, batches)
        if cfg.dense_precision == "bf16":
            bf16_model, bf16_opt, bf16_batches = build_ours(cfg, pg, "bf16")
            libs["ours_bf16"] = make_step(bf16_model, bf16_opt, bf16_batches)
        if cfg.bucket_cap_mb is not None:
            torch.manual_seed(0)
            bucket_model, bucket_opt, bucket_batches = build_ours(
                cfg, pg, bucket_cap_mb=cfg.bucket_cap_mb, sharding=cfg.sharding
            )
            libs["ours_bucket"] = make_step(bucket_model, bucket_opt, bucket_batches)
        if not cfg.skip_torchrec:
            try:
                trc_model, trc_opt, trc_batches = build_torchrec(cfg, pg)
                trc_make = (
                    functools.partial(pipelined_step_fn, "torchrec") if cfg.pipeline else step_fn
                )
                libs["torchrec"] = trc_make(trc_model, trc_opt, trc_batches)
            except Exception as exc:  # not installed, or its fbgemm does not load
                notes["torchrec"] = f"TorchRec unavailable: {type(exc).__name__}: {exc}"
        # Both ranks must agree on which libraries run (their steps are collectives).
        flags = torch.tensor([float("torchrec" in libs)])
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        if flags.item() == 0 and "torchrec" in libs:
            del libs["torchrec"]
            notes["torchrec"] = "TorchRec failed to build on the other rank"
        libs["dense"] = dense_floor_step(cfg, batches)
        if cfg.dense_precision == "bf16":
            libs["dense_bf16"] = dense_floor_step(cfg, batches, "bf16")
        timings = {name: Timing() for name in libs}
        for step in libs.values():
            for i in range(cfg.warmup):
                step(i, None)
        for r in range(cfg.repeats):
            for name, step in libs.items():
                dist.barrier()
                start, cpu_start = time.perf_counter(), time.process_time()
                step(r, timings[name])
                timings[name].step_ms.append((time.perf_counter() - start) * 1e3)
                # This process's CPU time: the work, without the time other jobs held the core
                # (and without blocking waits in gloo).
                timings[name].cpu_ms.append((time.process_time() - cpu_start) * 1e3)
        profiles = {}
        if cfg.profile:
            profiles = {
                name: profile_step(libs[name], rank, phases=not cfg.pipeline)
                for name in libs
                if not name.startswith("dense")
            }
        if cfg.bucket_cap_mb is not None:
            # Same batches, same number of steps: the bucket layout must not change a bit.
            same = all(
                len(la) == len(lb) and all(map(torch.equal, la, lb))
                for la, lb in zip(
                    map(_local, model.state_dict().values()),
                    map(_local, bucket_model.state_dict().values()),
                    strict=True,
                )
            )
            notes["ours_bucket"] = (
                f"bucket_cap_mb={cfg.bucket_cap_mb}: weights bit-identical to the default "
                f"wrapper's after the same steps (rank {rank}): {same}"
            )
        if rank == 0:
            queue.put(("ok", {k: t.medians() for k, t in timings.items()}, notes, profiles))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        queue.put(("error", rank, traceback.format_exc()))
        raise


def _local(t: Any) -> list[torch.Tensor]:
    """A state-dict value as plain tensors: this rank's shards of a sharded one."""
    return [s.tensor for s in t.local_shards()] if hasattr(t, "local_shards") else [t]


def dense_floor_step(cfg: Config, batches: list[Batch], precision: str = "fp32") -> StepFn:
    """The dense part of the step alone (dense arch, interaction, over arch, loss; forward and
    backward, no optimizer), on a local unsharded model whose pooled embeddings are a given
    leaf tensor: the same math in both libraries, so a floor under both steps. With `precision`
    "bf16", under the autocast of `DLRM.set_dense_precision` (the logits cast back to float32
    before the loss, as there)."""
    bf16 = precision == "bf16"
    tables = [
        EmbeddingBagConfig(name=f"t_{f}", num_embeddings=1, embedding_dim=cfg.dim)
        for f in feature_names(cfg)
    ]
    model = DLRM(
        EmbeddingBagCollection(tables, device="meta"), NUM_DENSE, cfg.dense_arch, cfg.over_arch
    )
    pooled = torch.randn(cfg.batch, cfg.tables, cfg.dim, requires_grad=True)

    def step(i: int, timing: Timing | None) -> None:
        batch = batches[i % len(batches)]
        t0 = time.perf_counter()
        model.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
            dense = model.dense_arch(batch.dense_features)
            logits = model.over_arch(model.inter_arch(dense, pooled)).squeeze(-1)
        logits = logits.float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if timing is not None:
            timing.fwd_ms.append((t1 - t0) * 1e3)
            timing.bwd_ms.append((t2 - t1) * 1e3)
            timing.opt_ms.append(0.0)

    return step


def profile_step(step: StepFn, rank: int, phases: bool) -> str:
    """torch.profiler's top operators (self CPU time) over 3 steps, on rank 0, and (plain
    loop) the last step's phases (`step_phases`)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            dist.barrier()
            step(i, None)
    if rank != 0:
        return ""
    table: str = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)
    if phases:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        rows = "\n".join(f"| {k} | {v:.1f} |" for k, v in step_phases(events).items())
        table += f"\nphases of the last step (wall ms, rank 0):\n| phase | ms |\n|---|---|\n{rows}"
    return table


PHASE_LABELS = ("step: zero_grad", "step: forward", "step: backward", "step: optimizer")

# Backward nodes by phase (substrings of the autograd node names, both libraries).
_INTERACTION_BWD = ("Bmm", "Transpose", "Index", "SplitWithSizes", "Cat", "Unsqueeze")
_POOLED_BWD = ("_Place", "_Link", "_Arrived", "_Launched", "All2All")
_EMBEDDING_BWD = ("SegmentLookup", "SplitLookup")


def step_phases(trace: list[dict[str, Any]]) -> dict[str, float]:
    """Wall ms per phase of the last step in a chrome trace of `step_fn`'s steps (the main
    thread's top-level operators, sorted by name and order; forward: ops before the lookup are
    the input dist, linear layers before the pooled output is placed the dense arch, after it
    the over arch; backward: autograd nodes up to the interaction's are the loss and over
    arch, those after the pooled all-to-all's the dense arch). A reading aid, not exact."""
    ops = [e for e in trace if e.get("ph") == "X"]
    start = max(e["ts"] for e in ops if e["name"] == PHASE_LABELS[0])
    ops = [e for e in ops if e["ts"] >= start]
    tid = next(e["tid"] for e in ops if e["name"] == PHASE_LABELS[1])
    ops = sorted((e for e in ops if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
    label = {e["name"]: e for e in ops if e["name"] in PHASE_LABELS}
    out: dict[str, float] = dict.fromkeys(
        ["input dist", "lookup", "output dist", "dense arch fwd", "interaction fwd",
         "over arch + loss fwd", "loss + over arch bwd", "interaction bwd",
         "pooled gradient all-to-all", "dense arch bwd", "embedding bwd + update",
         "DDP all-reduce (launch/wait)", "dense optimizer", "zero_grad", "other (Python, waits)"],
        0.0,
    )  # fmt: skip

    def add(phase: str, e: dict[str, Any]) -> None:
        out[phase] += e["dur"] / 1e3
        out["other (Python, waits)"] -= e["dur"] / 1e3

    def top(parent: dict[str, Any]) -> list[dict[str, Any]]:
        end, last, kids = parent["ts"] + parent["dur"], parent["ts"], []
        for e in ops:
            if e is not parent and e["ts"] >= last and e["ts"] + e["dur"] <= end:
                kids.append(e)
                last = e["ts"] + e["dur"]
        return kids

    forward, backward = label[PHASE_LABELS[1]], label[PHASE_LABELS[2]]
    out["other (Python, waits)"] = (forward["dur"] + backward["dur"]) / 1e3
    state = "input"
    for e in top(top(forward)[0]):  # the children of DDP's forward
        n = e["name"]
        if "SegmentLookup" in n or "[lookup]" in n:
            add("lookup", e)
            state = "looked up"
        elif "KJT" in n or "alltoall" in n or (state == "input" and n == "aten::cat"):
            add("input dist", e)
        elif "_Place" in n or "output_dist" in n or "EmbeddingBagCollectionAwaitable" in n:
            add("output dist", e)
            state = "interaction"
        elif n in ("aten::linear", "aten::relu"):
            add("over arch + loss fwd" if state == "interaction" else "dense arch fwd", e)
        elif n in ("aten::cat", "aten::bmm", "aten::index", "aten::index_select"):
            add("interaction fwd", e)
            state = "interaction"
        else:
            add("over arch + loss fwd", e)
    state = "over"
    for e in top(backward):
        n = e["name"].replace("autograd::engine::evaluate_function: ", "")
        if any(k in n for k in _EMBEDDING_BWD):
            add("embedding bwd + update", e)
        elif "allreduce" in n or "AccumulateGrad" in n:
            add("DDP all-reduce (launch/wait)", e)
        elif state in ("over", "interaction") and any(k in n for k in _INTERACTION_BWD):
            add("interaction bwd", e)
            state = "interaction"
        elif state != "over" and any(k in n for k in _POOLED_BWD):
            add("pooled gradient all-to-all", e)
            state = "pooled"
        elif state == "over":
            add("loss + over arch bwd", e)
        elif state == "interaction" and "Addmm" not in n:
            add("interaction bwd", e)
        elif state == "pooled" and "Addmm" not in n:
            add("pooled gradient all-to-all", e)
        else:
            add("dense arch bwd", e)
            state = "dense"
    out["dense optimizer"] = label[PHASE_LABELS[3]]["dur"] / 1e3
    out["zero_grad"] = label[PHASE_LABELS[0]]["dur"] / 1e3
    return out


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _bf16_support() -> str:
    """How this CPU runs bfloat16 matrix products: natively (its flags named) or emulated."""
    try:
        with open("/proc/cpuinfo") as f:
            words = set(f.read().split())
    except OSError:
        words = set()
    flags = [f for f in ("avx512_bf16", "amx_bf16") if f in words]
    # What shardrec_train.build.cpu_has_native_bf16 asks (not imported: shardrec_train pulls
    # in a data pipeline whose names clash with TorchRec's in one process).
    try:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        native = False
    if native:
        return f"native ({', '.join(flags) or 'oneDNN says supported'})"
    return "emulated (no avx512_bf16 / amx_bf16: bf16 is slower than fp32 here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--tables", type=int, default=26)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per table")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2048, help="samples per rank and step")
    parser.add_argument("--ids", type=int, default=20, help="mean ids per bag")
    parser.add_argument("--dense-arch", default="512,256,64")
    parser.add_argument("--over-arch", default="512,512,256,1")
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adagrad")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--profile", action="store_true", help="torch.profiler of ours")
    parser.add_argument("--no-torchrec", action="store_true", help="time ours only")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="step with each library's TrainPipelineSparseDist instead of the plain loop",
    )
    parser.add_argument(
        "--dense-precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: also time ours with the bf16 dense part (and the dense part alone in bf16)",
    )
    parser.add_argument(
        "--sharding",
        choices=("table_wise", "row_wise"),
        default="table_wise",
        help="row_wise: ours only (TorchRec's CPU path has no row_wise; implies --no-torchrec)",
    )
    parser.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="also time ours with this DDP bucket cap (MiB; the default wrapper's is 25: one "
        "bucket for DLRM's 3 MB of dense gradients), steps interleaved with the default",
    )
    args = parser.parse_args()
    dense_arch = [int(x) for x in args.dense_arch.split(",")]
    over_arch = [int(x) for x in args.over_arch.split(",")]
    if args.quick:
        args.tables, args.rows, args.batch, args.repeats = 4, 1000, 128, 3
        args.ids = min(args.ids, 5)
        dense_arch = [32, args.dim]
        over_arch = [32, 1]
    cfg = Config(
        tables=args.tables,
        rows=args.rows,
        dim=args.dim,
        batch=args.batch,
        ids=args.ids,
        dense_arch=dense_arch,
        over_arch=over_arch,
        optimizer=args.optimizer,
        lr=args.lr,
        warmup=2,
        repeats=args.repeats,
        batches=3,
        threads=args.threads,
        profile=args.profile,
        skip_torchrec=args.no_torchrec or args.sharding == "row_wise",
        pipeline=args.pipeline,
        dense_precision=args.dense_precision,
        bucket_cap_mb=args.bucket_cap_mb,
        sharding=args.sharding,
    )
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"python {sys.version.split()[0]}, {cfg.threads} intra-op thread(s) per rank, "
        f"loadavg before {_loadavg()}"
    )
    if cfg.dense_precision == "bf16":
        print(f"bf16: {_bf16_support()}")
    print(
        f"shapes: {cfg.tables} tables x {cfg.rows} rows x dim {cfg.dim} (one feature each), "
        f"{NUM_DENSE} dense, batch {cfg.batch} per rank, ~{cfg.ids} ids per bag, "
        f"dense arch {cfg.dense_arch}, over arch {cfg.over_arch}, {WORLD} gloo ranks, "
        f"{cfg.sharding}, "
        f"fused {OPTIMIZERS[cfg.optimizer][0]} + dense {OPTIMIZERS[cfg.optimizer][2].__name__}, "
        f"median of {cfg.repeats} steps after {cfg.warmup} warm-up, "
        f"{'TrainPipelineSparseDist' if cfg.pipeline else 'plain loop'}"
    )
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(
        run_rank, args=(cfg, free_port(), queue), nprocs=WORLD, join=True, start_method="spawn"
    )
    result = queue.get()
    if result[0] == "error":
        raise SystemExit(f"rank {result[1]} failed:\n{result[2]}")
    _, medians, notes, profiles = result
    samples = WORLD * cfg.batch
    print(
        "| library | step (ms) | forward | backward | optimizer step | samples/s | CPU ms |"
        "\n|---|---|---|---|---|---|---|"
    )
    labels = {
        "ours": "shardrec (ours)",
        "ours_bf16": "shardrec (ours), bf16 dense part",
        "ours_bucket": f"shardrec (ours), DDP bucket_cap_mb={cfg.bucket_cap_mb}",
        "torchrec": "TorchRec 1.8",
        "dense": "dense part alone (same math in both)",
        "dense_bf16": "dense part alone, bf16",
    }
    for name, m in medians.items():
        print(
            f"| {labels[name]} | {m['step']:.1f} | {m['fwd']:.1f} | {m['bwd']:.1f} "
            f"| {m['opt']:.1f} | {samples / m['step'] * 1e3:,.0f} | {m['cpu']:.1f} |"
        )
    floor = medians["dense"]["step"]
    print(f"ours minus the dense part: {medians['ours']['step'] - floor:.1f} ms")
    if "torchrec" in medians:
        trc = medians["torchrec"]["step"]
        print(f"TorchRec minus the dense part: {trc - floor:.1f} ms")
        print(
            f"ratio (ours samples/s / TorchRec samples/s): {trc / medians['ours']['step']:.2f}x "
            f"(target >= 2x; the ratio if ours cost only its dense part: {trc / floor:.2f}x)"
        )
    if "ours_bf16" in medians:
        bf16 = medians["ours_bf16"]["step"]
        print(
            f"bf16 dense part: ours fp32 / ours bf16 step {medians['ours']['step'] / bf16:.2f}x, "
            f"dense part alone fp32 / bf16 {floor / medians['dense_bf16']['step']:.2f}x"
        )
        if "torchrec" in medians:
            print(f"ratio (TorchRec fp32 / ours bf16): {medians['torchrec']['step'] / bf16:.2f}x")
    print(f"loadavg after: {_loadavg()}")
    for note in notes.values():
        print(f"note: {note}")
    for name, table in profiles.items():
        print(f"torch.profiler, {labels[name]}, rank 0, 3 steps:\n{table}")


if __name__ == "__main__":
    main()
