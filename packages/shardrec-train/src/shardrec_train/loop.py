"""The training loop: segments of steps between evaluations and checkpoints.

Global step k (0-based) trains the batch number `k % steps_per_epoch` of epoch
`k // steps_per_epoch`, whose order is a function of `(seed, epoch)` only; so a run resumed at
step k reads exactly the batches an uninterrupted run would have read from there.

Steps are run in segments ending at every evaluation, checkpoint and the last step. Each
segment gets its own TrainPipelineSparseDist over exactly its batches, so no batch's ids are
in flight while the model evaluates or saves; the pipeline's overlap is lost once per
segment, which is nothing next to an evaluation.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator

import torch
from torch import Tensor

from shardrec_collectives import ShardingEnv, all_reduce_sum
from shardrec_data import Batch, RecDataset
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist
from shardrec_metrics import AUC, NE, Accuracy, LogLoss, MetricCollection
from shardrec_optim import CombinedOptimizer
from shardrec_train.dynamic import HashTrick
from shardrec_train.options import TrainOptions

EVAL_BATCH_FACTOR = 4
"""Evaluation batches are this many times the training batch (no backward, no optimizer)."""

EVALS_PER_RUN = 10
"""Test evaluations of a run without `--eval-every`: enough points for a curve in auc.png."""


def eval_interval(eval_every: int | None, total: int) -> int:
    """Steps between evaluations: `--eval-every` when given (0: only at the end), else
    `ceil(total / EVALS_PER_RUN)`, which gives `EVALS_PER_RUN` evaluations when `total` is a
    multiple of it and never more (the last one is always at `total`)."""
    if eval_every is not None:
        return eval_every
    return max(1, -(-total // EVALS_PER_RUN))


def train_batches(
    dataset: RecDataset, opts: TrainOptions, *, rank: int, world_size: int, start_step: int
) -> Iterator[Batch]:
    """This rank's training batches from global step `start_step` to the end of the epochs."""
    per_epoch = dataset.num_batches("train", opts.batch_size, world_size)
    epoch, skip = divmod(start_step, per_epoch)
    while epoch < opts.epochs:
        batches = dataset.batches(
            "train",
            opts.batch_size,
            rank=rank,
            world_size=world_size,
            shuffle=True,
            seed=opts.seed,
            epoch=epoch,
        )
        yield from itertools.islice(batches, skip, None)
        skip = 0
        epoch += 1


def total_steps(dataset: RecDataset, opts: TrainOptions, world_size: int) -> int:
    """Steps of the whole run: all epochs, capped by `--max-steps`."""
    steps = opts.epochs * dataset.num_batches("train", opts.batch_size, world_size)
    return min(steps, opts.max_steps) if opts.max_steps else steps


def boundaries(start: int, total: int, eval_every: int, checkpoint_every: int) -> list[int]:
    """Steps after which a segment ends (sorted, > start, the last one is `total`)."""
    ends = {total}
    for every in (eval_every, checkpoint_every):
        if every:
            ends.update(range(every, total, every))
    return sorted(s for s in ends if s > start)


@dataclasses.dataclass
class Trainer:
    """Runs steps on one rank; `mean_over_ranks` averages each step's loss over `env`'s ranks
    (None: this process alone)."""

    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    device: torch.device
    _: dataclasses.KW_ONLY
    pipeline: bool
    env: ShardingEnv | None = None

    def _plain_step(self, batch: Batch) -> Tensor:
        batch = batch.to(self.device)
        self.optimizer.zero_grad()
        loss, _ = self.model(batch)
        assert isinstance(loss, Tensor)
        loss.backward()  # type: ignore[no-untyped-call]  # untyped in torch's stubs
        self.optimizer.step()
        return loss.detach()

    def steps(self, batches: Iterator[Batch], count: int) -> Iterator[Tensor]:
        """Train `count` batches, yielding each step's (local, detached) loss as it finishes."""
        segment = itertools.islice(batches, count)
        if not self.pipeline:
            for batch in segment:
                yield self._plain_step(batch)
            return
        pipe = TrainPipelineSparseDist(self.model, self.optimizer, self.device)
        while True:
            try:
                output = pipe.progress(segment)
            except StopIteration:
                return
            assert isinstance(output, tuple) and isinstance(output[0], Tensor)
            yield output[0]

    def mean_over_ranks(self, losses: list[Tensor]) -> list[float]:
        """Each step's loss averaged over the ranks (one all-reduce per segment).

        `losses`: (steps,) scalars of this rank; every rank of `env` calls it with as many.
        """
        if not losses:
            return []
        stacked = torch.stack(losses).float()
        if self.env is not None:
            stacked = all_reduce_sum(self.env, stacked).wait() / self.env.world_size
        return [float(v) for v in stacked.cpu().tolist()]


def evaluate(
    model: DistributedModelParallel,
    dataset: RecDataset,
    opts: TrainOptions,
    *,
    rank: int,
    world_size: int,
    device: torch.device,
    remap: HashTrick | None = None,
) -> dict[str, float]:
    """Test-split AUC, NE, log loss and accuracy over all ranks (every rank must call it).
    The model runs in `eval()` (dynamic tables only look up: nothing is admitted or counted
    as seen); `remap`: the hash trick's rows (`--raw-id-tables hash`)."""
    window = max(1, dataset.num_samples("test") // world_size)
    metrics = MetricCollection(
        [
            AUC(window_size=window),
            NE(window_size=window),
            LogLoss(window_size=window),
            Accuracy(window_size=window),
        ]
    )
    batches = dataset.batches(
        "test", opts.batch_size * EVAL_BATCH_FACTOR, rank=rank, world_size=world_size
    )
    if remap is not None:
        batches = remap.batches(batches, training=False)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                _, (_, logits, labels) = model(batch.to(device))
                metrics.update(predictions=torch.sigmoid(logits.float()), labels=labels.float())
    finally:
        model.train(was_training)
    values = metrics.compute()
    return {
        name: values[f"{name}/lifetime"]
        for name in ("auc", "ne", "log_loss", "accuracy")
        if f"{name}/lifetime" in values
    }


class Clock:
    """Training time only (evaluations and checkpoints excluded), for samples/s."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start: float | None = None

    def __enter__(self) -> Clock:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._start is not None
        self.seconds += time.perf_counter() - self._start
        self._start = None
