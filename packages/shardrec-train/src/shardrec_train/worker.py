"""One rank of `shardrec train` (inside torchrun): the run as a short script of named steps.

1. process group: nccl when CUDA GPUs are visible (and --backend auto), else gloo, with
   `--collective-timeout`, and the heartbeat watchdog (shardrec_collectives.Watchdog);
2. dataset, model, plan, DistributedModelParallel, optimizers (`build`);
3. rank 0 prints the plan report and charts the plan's per-rank load;
4. --resume: load the latest checkpoint that verifies (model + both optimizers), the history;
5. train in segments; evaluate and checkpoint at their ends;
6. the summary table, summary.json, the charts, and the `test AUC` line.
"""

from __future__ import annotations

import datetime
import importlib.util
import sys
import time
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore, Store
from torch.distributed.rendezvous import rendezvous

from shardrec_collectives import (
    EXIT_STATUS,
    ShardingEnv,
    Watchdog,
    agree_on_attempt,
    all_reduce_sum,
)
from shardrec_dmp import CheckpointError, load, save
from shardrec_planner import save_plan_chart
from shardrec_planner.report import format_report
from shardrec_tiered import CacheTooSmallError
from shardrec_train.build import build, dense_precision_note
from shardrec_train.checkpoints import History, latest_checkpoint, resume_latest, step_path
from shardrec_train.data import build_dataset
from shardrec_train.dynamic import DynamicStats, progress_text
from shardrec_train.loop import (
    Clock,
    Trainer,
    boundaries,
    eval_interval,
    evaluate,
    total_steps,
    train_batches,
)
from shardrec_train.options import TrainOptions
from shardrec_train.progress import LOSS_EVERY, Progress
from shardrec_train.report import format_summary, save_charts, summarize, write_summary
from shardrec_train.tiered import TierStats, cache_error_line, planned_tiered
from shardrec_train.tiered import stats_text as tier_text

OUTPUTS = "summary.json, history.json, plan.json, loss.png, auc.png, plan_load.png, checkpoints/"
"""What rank 0 leaves in OUT (report.py describes each)."""


def choose_backend(requested: str, cuda_available: bool) -> str:
    """`auto`: nccl when CUDA GPUs are visible, gloo otherwise."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    return requested


def init_distributed(opts: TrainOptions, environ: Mapping[str, str]) -> tuple[torch.device, Store]:
    """Join torchrun's process group; returns this rank's device and the group's store.

    The store keys of each torchrun attempt (`--max-restarts`) get their own prefix: torchrun
    keeps one store across restarts, and without the prefix a restarted rank can read the
    dead attempt's addresses and fail to connect (docs/dmp.md, fault tolerance). Rank 0 names
    the attempt (`agree_on_attempt`): torchrun's restart count differs between nodes once a
    node's launcher has been replaced.
    """
    backend = choose_backend(opts.backend, torch.cuda.is_available())
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=opts.collective_timeout)
    store, rank, world_size = next(rendezvous("env://", timeout=timeout))
    store = PrefixStore("shardrec", store)
    attempt = agree_on_attempt(store, rank=rank, world_size=world_size, timeout=timeout)
    store = PrefixStore(f"attempt_{attempt}", store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    return device, store


RESUME_FAILED = 3
"""Exit status of a rank when `--resume` finds no checkpoint that verifies."""


def train_worker(opts: TrainOptions, environ: Mapping[str, str]) -> int:
    """Train on this rank; returns the exit status."""
    started = time.perf_counter()
    # torch 2.13 deprecates the old collective names some callers still use; the warning
    # would print once per rank into the progress bar and says nothing to a user.
    warnings.filterwarnings(
        "ignore", message=r".*is deprecated. Please use", category=FutureWarning
    )
    if opts.threads is not None:
        # `--threads` wins over OMP_NUM_THREADS also when torchrun was called directly.
        torch.set_num_threads(opts.threads)
    device, store = init_distributed(opts, environ)
    watchdog = Watchdog(
        store,
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        timeout=datetime.timedelta(seconds=opts.collective_timeout),
    ).start()
    try:
        return _train(opts, environ, device, started, watchdog)
    except CacheTooSmallError as err:  # --tiered: one line naming the flags, not a traceback
        print(f"[rank {dist.get_rank()}] {cache_error_line(err)}", file=sys.stderr, flush=True)
        return 1
    except Exception:
        # A peer that the watchdog stopped closes its sockets, so this rank's collective may
        # fail before its own watchdog reads the verdict: report the cause, not the symptom.
        verdict = watchdog.verdict()
        if verdict is None:
            raise
        print(f"[rank {dist.get_rank()}] {verdict}", file=sys.stderr, flush=True)
        return EXIT_STATUS
    finally:
        watchdog.stop()
        dist.destroy_process_group()


def _train(
    opts: TrainOptions,
    environ: Mapping[str, str],
    device: torch.device,
    started: float,
    watchdog: Watchdog,
) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(environ.get("LOCAL_WORLD_SIZE", str(world)))
    lead = rank == 0
    out = opts.out
    if lead:
        out.mkdir(parents=True, exist_ok=True)
    dataset = build_dataset(opts)
    built = build(
        opts,
        dataset,
        device=device,
        world_size=world,
        local_world_size=local_world,
        pg=dist.group.WORLD,
    )
    model, optimizer, remap = built.model, built.optimizer, built.remap
    if lead:
        kernels = "fbgemm" if importlib.util.find_spec("fbgemm_gpu") else "torch-native"
        print(
            f"shardrec train: {opts.dataset}, {opts.model}, {world} rank(s) on {device.type}, "
            f"{kernels} kernels"
        )
        note = dense_precision_note(opts.dense_precision, device)
        if note is not None:
            print(note, flush=True)
        print(format_report(built.plan), flush=True)
        (out / "plan.json").write_text(built.plan.to_json())
        save_plan_chart(built.plan, out / "plan_load.png")

    start, history = 0, History()
    # A torchrun restart (--max-restarts) resumes from the latest checkpoint by itself.
    # Agreed over the ranks: after a node's launcher was replaced, its ranks are not counted
    # as restarted by their (new) torchrun agent while the other nodes' ranks are.
    restarted = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    wanted = torch.tensor([int(opts.resume or restarted)], device=device)
    world_pg = dist.group.WORLD
    assert world_pg is not None  # init_distributed made it
    env = ShardingEnv.from_process_group(world_pg, device=device)
    restarted = bool(all_reduce_sum(env, wanted).wait().item() > 0)
    latest = latest_checkpoint(out)
    if opts.resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {out / 'checkpoints'}")
    resume = latest is not None and (opts.resume or restarted)
    if resume:
        try:
            start, path = resume_latest(
                out, lambda p: load(str(p), model, {"optimizer": optimizer}), lead=lead
            )
        except CheckpointError as err:
            # Every rank tried the same checkpoints in step and failed alike: one line from
            # the lead rank, not a traceback per rank.
            if lead:
                print(f"shardrec train: error: {err}", file=sys.stderr, flush=True)
            return RESUME_FAILED
        history = History.read(out)
        history.truncate(start)
        if lead:
            print(f"resumed from {path} at step {start}", flush=True)

    total = total_steps(dataset, opts, world)
    eval_every = eval_interval(opts.eval_every, total)
    batches = train_batches(dataset, opts, rank=rank, world_size=world, start_step=start)
    if remap is not None:  # the hash trick's rows (dynamic tables map ids in the model)
        batches = remap.batches(batches, training=True)
    assert dist.group.WORLD is not None  # init_distributed ran
    world_env = ShardingEnv.from_process_group(dist.group.WORLD, device)
    # The dynamic tables' counters over all ranks: every rank joins each reading.
    dynamic = DynamicStats(model, world_env)
    trainer = Trainer(model, optimizer, device, pipeline=opts.pipeline, env=world_env)
    tiered = planned_tiered(built.plan)
    tier = TierStats(model, tiered, world_env) if tiered else None
    progress = Progress(
        enabled=lead, total=total, initial=start, samples_per_step=opts.batch_size * world
    )
    clock = Clock()
    step = start
    saved_at = start if resume else -1
    for end in boundaries(start, total, eval_every, opts.checkpoint_every):
        losses: list[torch.Tensor] = []
        with clock:
            for loss in trainer.steps(batches, end - step):
                losses.append(loss)
                step += 1
                watchdog.progress = step
                shown = float(loss) if lead and step % LOSS_EVERY == 0 else None
                if dynamic and step % LOSS_EVERY == 0:
                    progress.detail(progress_text(dynamic.stats()))
                if tier is not None and step % LOSS_EVERY == 0:  # a collective: every rank
                    progress.detail(tier_text(tier.collect()))
                progress.step(step, shown)
        history.train_loss += list(
            zip(range(end - len(losses) + 1, end + 1), trainer.mean_over_ranks(losses), strict=True)
        )
        if step != end:
            raise RuntimeError(f"the training data ended at step {step}, before step {end}")
        if (eval_every and end % eval_every == 0) or end == total:
            metrics = evaluate(
                model, dataset, opts, rank=rank, world_size=world, device=device, remap=remap
            )
            history.evals.append((end, metrics))
            text = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
            if dynamic:
                text += f" | {progress_text(dynamic.stats())}"
            if tier is not None:  # a collective: every rank evaluates here
                text += f" | {tier_text(tier.collect())}"
            progress.write(f"step {end}: test {text}")
        if (opts.checkpoint_every and end % opts.checkpoint_every == 0) or end == total:
            if saved_at != end:
                save(str(step_path(out, end)), model, {"optimizer": optimizer})
                saved_at = end
            if lead:
                history.write(out)
        progress.pause()
    progress.close()
    counters = dynamic.stats() if dynamic else {}
    tier_stats = tier.collect() if tier is not None else None  # a collective: every rank

    if not lead:
        return 0
    history.write(out)
    trained = step - start
    summary = summarize(
        history,
        steps=step,
        samples_per_second=trained * opts.batch_size * world / clock.seconds
        if clock.seconds > 0
        else 0.0,
        wall_seconds=time.perf_counter() - started,
        world_size=world,
    )
    if counters:
        summary["dynamic_tables"] = counters
    if tier_stats is not None:
        summary["tiered_tables"] = tier_stats
    write_summary(out, summary, opts.to_dict())
    save_charts(out, history)
    print(format_summary(summary))
    if counters:
        print(f"dynamic tables: {progress_text(counters)}")
    if tier_stats is not None:
        print("tiered tables (summed over ranks):")
        for name, stats in tier_stats.items():
            print(f"  {tier_text({name: stats})}")
    print(f"outputs: {out} ({OUTPUTS})")
    print(f"test AUC {summary['test_auc']:.4f}", flush=True)
    return 0
