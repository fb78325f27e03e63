"""What rank 0 leaves behind: the summary table, OUT/summary.json and the PNG charts.

OUT/summary.json   steps, samples/s, final train loss, test metrics, wall time, options
OUT/loss.png       train loss per step (mean over ranks) and test log loss per evaluation
OUT/auc.png        test AUC per evaluation (10 by default: a curve)
OUT/plan_load.png  per-rank table memory and estimated cost of the plan (shardrec_planner)
(history.json and plan.json are written by the worker and checkpoints.py.)
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Literal

from shardrec_train.checkpoints import History

FINAL_LOSS_WINDOW = 50
"""The summary's final train loss is the mean of the last this many steps."""


def summarize(
    history: History,
    *,
    steps: int,
    samples_per_second: float,
    wall_seconds: float,
    world_size: int,
) -> dict[str, object]:
    """The numbers of the summary table (test metrics from the last evaluation)."""
    tail = [v for _, v in history.train_loss[-FINAL_LOSS_WINDOW:]]
    final_eval = history.evals[-1][1] if history.evals else {}
    return {
        "steps": steps,
        "world_size": world_size,
        "samples_per_second": samples_per_second,
        "final_train_loss": sum(tail) / len(tail) if tail else float("nan"),
        "test_auc": final_eval.get("auc", float("nan")),
        "test_ne": final_eval.get("ne", float("nan")),
        "test_log_loss": final_eval.get("log_loss", float("nan")),
        "test_accuracy": final_eval.get("accuracy", float("nan")),
        "wall_seconds": wall_seconds,
    }


def format_summary(summary: dict[str, object]) -> str:
    """A two-column table of `summarize`'s numbers."""
    labels = [
        ("steps", "steps", "{:d}"),
        ("samples_per_second", "samples/s (all ranks)", "{:,.0f}"),
        ("final_train_loss", f"train loss (last {FINAL_LOSS_WINDOW} steps)", "{:.4f}"),
        ("test_auc", "test AUC", "{:.4f}"),
        ("test_ne", "test NE", "{:.4f}"),
        ("test_log_loss", "test log loss", "{:.4f}"),
        ("test_accuracy", "test accuracy", "{:.4f}"),
        ("wall_seconds", "wall time (s)", "{:.1f}"),
    ]
    rows = [(label, fmt.format(summary[key])) for key, label, fmt in labels]
    width = max(len(label) for label, _ in rows)
    rule = "-" * (width + 2 + max(len(v) for _, v in rows))
    return "\n".join([rule, *(f"{label.ljust(width)}  {value}" for label, value in rows), rule])


def write_summary(
    out: pathlib.Path, summary: dict[str, object], options: dict[str, object]
) -> None:
    (out / "summary.json").write_text(json.dumps({**summary, "options": options}, indent=2) + "\n")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Curve:
    """One line of a chart: `values[i]` at `steps[i]`."""

    label: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    markers: bool = False
    color: str = "tab:blue"
    alpha: float = 1.0


def _moving_mean(values: Sequence[float], k: int) -> list[float]:
    """Mean of each value and the up to k - 1 before it (a running sum: O(n))."""
    out: list[float] = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= k:
            total -= values[i - k]
        out.append(total / min(i + 1, k))
    return out


def chart_series(history: History) -> dict[str, list[Curve]]:
    """What `save_charts` draws, per file: loss.png (train loss per step, its moving mean over
    about 1/50 of the run, test log loss per evaluation) and auc.png (test AUC per evaluation:
    one point per `--eval-every`, 10 by default)."""
    loss: list[Curve] = []
    if history.train_loss:
        steps = tuple(s for s, _ in history.train_loss)
        values = [v for _, v in history.train_loss]
        k = max(1, len(values) // 50)
        loss.append(Curve(label="train loss (step)", steps=steps, values=tuple(values), alpha=0.35))
        loss.append(
            Curve(
                label=f"train loss (mean of {k})",
                steps=steps,
                values=tuple(_moving_mean(values, k)),
            )
        )
    log_loss = [(s, m["log_loss"]) for s, m in history.evals if "log_loss" in m]
    if log_loss:
        loss.append(_curve("test log loss", log_loss, "tab:red"))
    aucs = [(s, m["auc"]) for s, m in history.evals if "auc" in m]
    return {"loss.png": loss, "auc.png": [_curve("test AUC", aucs, "tab:green")] if aucs else []}


def _curve(label: str, points: Sequence[tuple[int, float]], color: str) -> Curve:
    return Curve(
        label=label,
        steps=tuple(s for s, _ in points),
        values=tuple(v for _, v in points),
        markers=True,
        color=color,
    )


_AXES: dict[str, tuple[str, Literal["upper right", "lower right"]]] = {
    "loss.png": ("binary cross-entropy", "upper right"),
    "auc.png": ("AUC", "lower right"),
}


def save_charts(out: pathlib.Path, history: History) -> list[pathlib.Path]:
    """loss.png and auc.png from the history (matplotlib, Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[pathlib.Path] = []
    for name, curves in chart_series(history).items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for c in curves:
            fmt, width = ("o-", 1.5) if c.markers else ("-", 0.8 if c.alpha < 1 else 1.5)
            ax.plot(c.steps, c.values, fmt, label=c.label, color=c.color, alpha=c.alpha, lw=width)
        ylabel, legend = _AXES[name]
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if curves:
            ax.legend(loc=legend)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(out / name)
        fig.savefig(written[-1], format="png", dpi=90)
        plt.close(fig)
    return written
