"""What rank 0 leaves behind: the summary table, OUT/summary.json and the PNG charts.

OUT/summary.json   steps, samples/s, final train loss, test metrics, wall time, options
OUT/loss.png       train loss per step (mean over ranks) and test log loss per evaluation
OUT/auc.png        test AUC per evaluation
OUT/plan_load.png  per-rank table memory and estimated cost of the plan
"""

from __future__ import annotations

import json
import pathlib

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


def save_charts(out: pathlib.Path, history: History) -> list[pathlib.Path]:
    """loss.png and auc.png from the history (matplotlib, Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[pathlib.Path] = []
    fig, ax = plt.subplots(figsize=(7, 4))
    if history.train_loss:
        steps = [s for s, _ in history.train_loss]
        values = [v for _, v in history.train_loss]
        ax.plot(steps, values, color="tab:blue", alpha=0.35, lw=0.8, label="train loss (step)")
        k = max(1, len(values) // 50)
        smooth = [
            sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1])
            for i in range(len(values))
        ]
        ax.plot(steps, smooth, color="tab:blue", lw=1.5, label=f"train loss (mean of {k})")
    evals = [(s, m["log_loss"]) for s, m in history.evals if "log_loss" in m]
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", color="tab:red", label="test log loss")
    ax.set_xlabel("step")
    ax.set_ylabel("binary cross-entropy")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(out / "loss.png")
    fig.savefig(written[-1], format="png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    aucs = [(s, m["auc"]) for s, m in history.evals if "auc" in m]
    if aucs:
        ax.plot(*zip(*aucs, strict=True), "o-", color="tab:green", label="test AUC")
    ax.set_xlabel("step")
    ax.set_ylabel("AUC")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(out / "auc.png")
    fig.savefig(written[-1], format="png", dpi=90)
    plt.close(fig)
    return written
