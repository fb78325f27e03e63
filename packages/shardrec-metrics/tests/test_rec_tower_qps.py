"""TorchRec's tower QPS against a hand count of examples and seconds on a fake clock, on one
process and over 2 real gloo ranks (sum of examples over the slowest rank's seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import pytest
import torch

from shardrec_metrics.rec.computation import RecMetricException
from shardrec_metrics.rec.metric_module import RecMetricModule, generate_metric_module
from shardrec_metrics.rec.metrics_config import (
    MetricsConfig,
    RecComputeMode,
    RecMetricDef,
    RecMetricEnum,
    RecTaskInfo,
)
from shardrec_metrics.rec.tower_qps import TowerQPSMetric
from shardrec_testing import RankContext, RankPool

TASKS = ["a", "b"]


class Clock:
    """A `time.monotonic` that returns what the test sets."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _expected(
    sizes: Sequence[int], times: Sequence[float], start: float, warmup: int, window: int
) -> tuple[float, float, list[int], list[float]]:
    """(lifetime, window qps, post-warmup window sizes, their seconds) by hand: step k (from
    1) at times[k-1]; the clock starts at step `warmup` (at `start` when it is 0)."""
    begin = start if warmup == 0 else times[warmup - 1]
    after = list(sizes[warmup:])
    lapses = [t - p for p, t in zip([begin, *times[warmup:]], times[warmup:], strict=False)]
    kept_sizes: list[int] = []
    kept_lapses: list[float] = []
    for n, s in zip(reversed(after), reversed(lapses), strict=True):
        if sum(kept_sizes) + n > window:
            break
        kept_sizes.append(n)
        kept_lapses.append(s)
    life = sum(after) / sum(lapses) if lapses else 0.0
    win = sum(kept_sizes) / sum(kept_lapses) if kept_lapses else 0.0
    return life, win, kept_sizes, kept_lapses


def _run(
    mode: RecComputeMode,
    sizes: Sequence[int],
    times: Sequence[float],
    start: float,
    world: int = 1,
    rank: int = 0,
    tasks: Sequence[str] = TASKS,
    **kw: object,
) -> dict[str, float]:
    clock = Clock(start)
    with mock.patch("time.monotonic", clock):
        metric = TowerQPSMetric(
            world_size=world,
            my_rank=rank,
            batch_size=4,
            tasks=[RecTaskInfo(name=t) for t in tasks],
            compute_mode=mode,
            window_size=10 * world,
            **kw,
        )
        for n, t in zip(sizes, times, strict=True):
            clock.now = t
            labels = torch.randint(0, 2, (len(tasks), n)).double()
            if mode == RecComputeMode.UNFUSED_TASKS_COMPUTATION:
                metric.update(
                    predictions=None,
                    labels={x: labels[i] for i, x in enumerate(tasks)},
                    weights=None,
                )
            else:
                metric.update(predictions=None, labels=labels, weights=None)
        return {k: float(v) for k, v in metric.compute().items()}


SIZES = [4, 3, 4, 2, 4, 3, 1]
TIMES = [10.0, 10.5, 11.25, 13.0, 13.1, 14.75, 15.0]


@pytest.mark.parametrize("mode", list(RecComputeMode))
@pytest.mark.parametrize("warmup", [0, 2, 7])
@pytest.mark.parametrize("tasks", [["a"], TASKS])
def test_tower_qps_is_examples_over_seconds_after_warmup(
    mode: RecComputeMode, warmup: int, tasks: list[str]
) -> None:
    got = _run(mode, SIZES, TIMES, start=9.0, tasks=tasks, warmup_steps=warmup)
    life, win, _, _ = _expected(SIZES, TIMES, 9.0, warmup, 10)
    for t in tasks:
        assert got[f"qps-{t}|lifetime_qps"] == pytest.approx(life, rel=1e-12)
        assert got[f"qps-{t}|window_qps"] == pytest.approx(win, rel=1e-12)
        assert got[f"qps-{t}|total_examples"] == sum(SIZES)


def test_tower_qps_refuses_bad_arguments() -> None:
    kw = {"world_size": 1, "my_rank": 0, "batch_size": 4, "tasks": [RecTaskInfo(name="a")]}
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=f"warmup_steps must be an int >= 0, got {bad}"):
            TowerQPSMetric(**kw, warmup_steps=bad)
    with pytest.raises(RecMetricException, match="Fused update"):
        TowerQPSMetric(**kw, fused_update_limit=2)


def test_generated_module_reports_tower_qps() -> None:
    config = MetricsConfig(
        rec_tasks=[RecTaskInfo(name="a")],
        rec_metrics={
            RecMetricEnum.TOWER_QPS: RecMetricDef(
                rec_task_indices=[0], window_size=100, arguments={"warmup_steps": 1}
            )
        },
    )
    clock = Clock(0.0)
    with mock.patch("time.monotonic", clock):
        module = generate_metric_module(
            RecMetricModule, config, 4, 1, 0, state_metrics_mapping={}, device="cpu"
        )
        for step in range(3):
            clock.now = 2.0 * step
            module.update(
                {"label": torch.ones(4), "prediction": torch.rand(4), "weight": torch.ones(4)}
            )
        out = module.compute()
    assert float(out["qps-a|lifetime_qps"]) == pytest.approx(8 / 4.0)
    assert int(out["qps-a|total_examples"]) == 12


RANK_SIZES = {0: [4, 2, 4, 3], 1: [3, 3, 1, 4]}
RANK_TIMES = {0: [1.0, 2.0, 4.0, 4.5], 1: [1.0, 3.0, 3.5, 7.0]}


def check_ranks(ctx: RankContext, mode_value: int) -> dict[str, float]:
    mode = RecComputeMode(mode_value)
    r = ctx.rank
    return _run(mode, RANK_SIZES[r], RANK_TIMES[r], 0.0, ctx.world_size, r, warmup_steps=1)


@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_two_ranks_sum_examples_over_the_slowest_rank(
    rank_pool: RankPool, mode: RecComputeMode
) -> None:
    got = rank_pool.run(check_ranks, mode.value)[0]
    per_rank = [_expected(RANK_SIZES[r], RANK_TIMES[r], 0.0, 1, 10) for r in (0, 1)]
    life = sum(sum(RANK_SIZES[r][1:]) for r in (0, 1)) / max(
        RANK_TIMES[r][-1] - RANK_TIMES[r][0] for r in (0, 1)
    )
    win = sum(sum(e[2]) for e in per_rank) / max(sum(e[3]) for e in per_rank)
    for t in TASKS:
        assert got[f"qps-{t}|lifetime_qps"] == pytest.approx(life, rel=1e-12)
        assert got[f"qps-{t}|window_qps"] == pytest.approx(win, rel=1e-12)
        assert got[f"qps-{t}|total_examples"] == sum(map(sum, RANK_SIZES.values()))


def test_a_task_missing_from_labels_is_skipped_for_that_batch() -> None:
    """Per task examples by hand: a batch counts only for the tasks its labels hold, whatever
    the predictions hold; under validation a task with all-zero weights is not counted, and
    one with no weights entry is."""
    metric = TowerQPSMetric(
        world_size=1,
        my_rank=0,
        batch_size=4,
        tasks=[RecTaskInfo(name=t) for t in TASKS],
        warmup_steps=0,
        should_validate_update=True,
    )
    counts = {"a": 0, "b": 0}
    g = torch.Generator().manual_seed(3)
    present_by_step = [["a"], ["b"], TASKS, TASKS, ["b"]]
    for step, (n, present) in enumerate(zip([4, 3, 2, 4, 1], present_by_step, strict=True)):
        labels = {t: torch.randint(0, 2, (n,), generator=g).double() for t in present}
        predictions = {t: torch.rand(n, generator=g) for t in TASKS}
        weights = {"a": torch.zeros(n) if step == 3 else torch.ones(n)}  # no entry for "b"
        metric.update(predictions=predictions, labels=labels, weights=weights)
        for t in present:
            counts[t] += 0 if (t == "a" and step == 3) else n
    out = metric.compute()
    for t in TASKS:
        assert int(out[f"qps-{t}|total_examples"]) == counts[t]
        assert f"qps-{t}|window_qps" in out and f"qps-{t}|lifetime_qps" in out
