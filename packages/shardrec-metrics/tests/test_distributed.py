"""On 1, 2 and 3 gloo ranks with uneven sample counts, compute() equals the pooled value.

Every rank builds every rank's batches from seeds, feeds its own to the metrics, and compares the
collective result with the reference computed locally on all ranks' samples pooled: for the
lifetime, every sample; for the window, each rank's last `window_size` samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from _reference import naive_accuracy, naive_auc, naive_log_loss, naive_ne

from shardrec_metrics import AUC, NE, Accuracy, LogLoss, MetricCollection, Throughput, roc_auc
from shardrec_testing import RankContext, RankPool, seeded_generator

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
REFERENCES: dict[str, Callable[[list[float], list[float], list[float]], float]] = {
    "auc": naive_auc,
    "ne": naive_ne,
    "log_loss": naive_log_loss,
    "accuracy": naive_accuracy,
}


def _rank_batches(seed: int, rank: int, empty_rank: int | None) -> list[Batch]:
    """Rank `rank`'s batches: rank r sends r + 2 batches of 0..30 samples, ties and zero weights."""
    if rank == empty_rank:
        return []
    gen = seeded_generator("metrics", seed, rank)
    batches = []
    for _ in range(rank + 2):
        n = int(torch.randint(0, 31, (1,), generator=gen))
        p = torch.rand(n, generator=gen)
        p = torch.where(torch.rand(n, generator=gen) < 0.5, (p * 8).round() / 8, p)
        y = (torch.rand(n, generator=gen) < p).float()
        w = torch.where(torch.rand(n, generator=gen) < 0.1, 0.0, torch.rand(n, generator=gen) * 3)
        batches.append((p, y, w))
    return batches


def _cat(batches: list[Batch]) -> Batch:
    if not batches:
        return torch.empty(0), torch.empty(0), torch.empty(0)
    p, y, w = zip(*batches, strict=True)
    return torch.cat(p), torch.cat(y), torch.cat(w)


def check_pooled(
    ctx: RankContext, seed: int, window_size: int, empty_rank: int | None, explicit: bool
) -> dict[str, float]:
    group = ctx.pg if explicit else None  # None: the default group, initialized by the pool
    metrics = MetricCollection(
        [
            AUC(window_size=window_size, process_group=group),
            NE(window_size=window_size, process_group=group),
            LogLoss(window_size=window_size, process_group=group),
            Accuracy(window_size=window_size, process_group=group),
        ]
    )
    for p, y, w in _rank_batches(seed, ctx.rank, empty_rank):
        metrics.update(predictions=p, labels=y, weights=w)
    got = metrics.compute()

    per_rank = [_cat(_rank_batches(seed, r, empty_rank)) for r in range(ctx.world_size)]
    pooled = [torch.cat(col) for col in zip(*per_rank, strict=True)]
    window = [torch.cat([c[-window_size:] for c in col]) for col in zip(*per_rank, strict=True)]
    # AUC: the same function on the pooled rows, so equal to the last bit up to summation order.
    assert got["auc/lifetime"] == pytest.approx(roc_auc(*pooled), rel=1e-12, nan_ok=True)
    assert got["auc/window"] == pytest.approx(roc_auc(*window), rel=1e-12, nan_ok=True)
    for name, ref in REFERENCES.items():
        for key, cols in (("lifetime", pooled), ("window", window)):
            expected = ref(*(c.tolist() for c in cols))
            assert got[f"{name}/{key}"] == pytest.approx(expected, rel=1e-9, nan_ok=True), (
                name,
                key,
            )
    return got


def _same_on_every_rank(results: list[dict[str, float]]) -> None:
    for r, res in enumerate(results[1:], start=1):
        for key, value in res.items():
            same = value == results[0][key] or (math.isnan(value) and math.isnan(results[0][key]))
            assert same, f"rank {r} {key}={value!r}, rank 0 has {results[0][key]!r}"


@pytest.mark.parametrize("rank_pool", [1, 2, 3], indirect=True)
@pytest.mark.parametrize(("window_size", "explicit"), [(7, True), (100_000, False)])
def test_equals_pooled_single_process(
    rank_pool: RankPool, window_size: int, explicit: bool
) -> None:
    results = rank_pool.run(check_pooled, 0, window_size, None, explicit)
    _same_on_every_rank(results)
    assert not math.isnan(results[0]["auc/lifetime"])


def test_a_rank_without_samples(pool_factory: Callable[[int], RankPool]) -> None:
    results = pool_factory(3).run(check_pooled, 1, 11, 1, True)
    _same_on_every_rank(results)


def check_nothing_anywhere(ctx: RankContext) -> dict[str, float]:
    metrics = MetricCollection([AUC(), NE(), LogLoss(), Accuracy()])
    metrics.update(predictions=torch.empty(0), labels=torch.empty(0))
    return metrics.compute()


def test_no_samples_on_any_rank_is_nan_without_hanging(
    pool_factory: Callable[[int], RankPool],
) -> None:
    results = pool_factory(2).run(check_nothing_anywhere, timeout_s=60)
    assert all(math.isnan(v) for res in results for v in res.values())


class _StepClock:
    """Returns `times` in order, then repeats the last one."""

    def __init__(self, times: list[float]) -> None:
        self.times = times

    def __call__(self) -> float:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


def check_throughput(ctx: RankContext) -> dict[str, float]:
    # reset at 0, one update at 5, compute at 10 + rank: the mean elapsed is 10 + (W - 1) / 2
    tp = Throughput(window_seconds=4.0, clock=_StepClock([0.0, 5.0, 10.0 + ctx.rank]))
    tp.update(100 * (ctx.rank + 1))
    return tp.compute()


@pytest.mark.parametrize("rank_pool", [1, 3], indirect=True)
def test_throughput_sums_ranks(rank_pool: RankPool) -> None:
    world = rank_pool.world_size
    results = rank_pool.run(check_throughput)
    total = 100 * world * (world + 1) / 2
    mean_elapsed = 10 + (world - 1) / 2
    for res in results:
        assert res["throughput/lifetime"] == pytest.approx(total / mean_elapsed)
        # the update at t=5 lies outside the last 4 s on every rank
        assert res["throughput/window"] == 0.0
