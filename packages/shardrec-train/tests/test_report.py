"""The charts rank 0 writes: the series they plot (against a naive reference) and the PNGs."""

from __future__ import annotations

import pathlib
import random

from shardrec_train.checkpoints import History
from shardrec_train.loop import boundaries, eval_interval
from shardrec_train.report import chart_series, save_charts

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _history(total: int, eval_every: int | None, seed: int = 0) -> History:
    """A run's history as the worker records it: a loss per step, metrics per evaluation."""
    rng = random.Random(seed)
    every = eval_interval(eval_every, total)
    history = History(
        train_loss=[(s, 0.7 - s / (3 * total) + rng.random() / 20) for s in range(1, total + 1)]
    )
    for end in boundaries(0, total, every, 0):
        if (every and end % every == 0) or end == total:
            history.evals.append((end, {"auc": 0.5 + end / (3 * total), "log_loss": 0.6}))
    return history


def test_default_schedule_makes_auc_a_curve(tmp_path: pathlib.Path) -> None:
    """316 steps (MovieLens' default run) without --eval-every: 10 AUC points, last at the end."""
    history = _history(316, None)
    [auc] = chart_series(history)["auc.png"]
    assert len(auc.steps) == 10 and auc.steps[-1] == 316
    assert list(auc.values) == [m["auc"] for _, m in history.evals]
    assert list(auc.steps) == sorted(set(auc.steps))
    for path in save_charts(tmp_path, history):
        assert path.read_bytes().startswith(PNG_MAGIC), path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auc.png", "loss.png"]


def test_eval_only_at_the_end_is_one_point() -> None:
    [auc] = chart_series(_history(50, 0))["auc.png"]
    assert auc.steps == (50,)


def test_loss_series_and_its_moving_mean_against_a_loop() -> None:
    history = _history(230, 23, seed=3)
    raw, smooth, test = chart_series(history)["loss.png"]
    values = [v for _, v in history.train_loss]
    k = len(values) // 50
    assert raw.values == tuple(values) and raw.steps == tuple(range(1, 231))
    expected = [
        sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1])
        for i in range(len(values))
    ]
    assert smooth.label == f"train loss (mean of {k})"
    assert all(abs(a - b) < 1e-12 for a, b in zip(smooth.values, expected, strict=True))
    assert test.steps == tuple(range(23, 231, 23)) and test.markers


def test_empty_history_still_writes_both_charts(tmp_path: pathlib.Path) -> None:
    assert chart_series(History()) == {"loss.png": [], "auc.png": []}
    assert [p.name for p in save_charts(tmp_path, History())] == ["loss.png", "auc.png"]
