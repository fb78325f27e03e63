"""The real command on 2 gloo ranks (torchrun subprocesses): outputs, and resume after a crash."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
import torch
from _train_helpers import (
    AUC_LINE,
    SMALL_MODEL,
    SYNTHETIC,
    checkpoint_tensors,
    run_shardrec,
    write_ml100k,
)

PNGS = ("loss.png", "auc.png", "plan_load.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_outputs(out: pathlib.Path, stdout: str, *, steps: int, evals: int) -> dict[str, object]:
    """summary.json, charts and the final AUC line agree; returns the summary."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == steps
    assert summary["world_size"] == 2
    auc = summary["test_auc"]
    assert isinstance(auc, float) and 0.0 <= auc <= 1.0
    for key in ("test_ne", "test_log_loss", "test_accuracy", "final_train_loss"):
        value = summary[key]
        assert isinstance(value, float) and value == value, key  # not NaN
    assert summary["samples_per_second"] > 0 and summary["wall_seconds"] > 0
    for name in PNGS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, name
    history = json.loads((out / "history.json").read_text())
    assert [s for s, _ in history["train_loss"]] == list(range(1, steps + 1))
    assert len(history["evals"]) == evals
    assert history["evals"][-1]["auc"] == auc
    found = AUC_LINE.findall(stdout)
    assert found == [f"{auc:.4f}"], stdout[-2000:]
    assert "per-table decisions" in stdout  # the plan report
    [listed] = [line for line in stdout.splitlines() if line.startswith("outputs: ")]
    for name in ("summary.json", "history.json", "plan.json", *PNGS):
        assert name in listed and (out / name).is_file(), name
    return summary


@pytest.mark.slow
def test_synthetic_run_then_crash_and_resume(tmp_path: pathlib.Path) -> None:
    """A full run; then its output directory as a crash would leave it (checkpoints after
    step 6 lost, history up to step 16 written), resumed: the same 16 steps and the same final
    tables, dense weights and optimizer state, bit for bit (the data order is a function of
    (seed, epoch), so steps 7-16 read the same batches again)."""
    common = [*SYNTHETIC, "--epochs", "2", "--eval-every", "8", "--checkpoint-every", "6"]
    full = tmp_path / "full"
    result = run_shardrec(["train", *common, "--out", str(full)])
    assert result.returncode == 0, result.stderr[-3000:]
    _check_outputs(full, result.stdout, steps=16, evals=2)
    assert sorted(p.name for p in (full / "checkpoints").iterdir()) == [
        "step_12",
        "step_16",
        "step_6",
    ]

    crashed = tmp_path / "crashed"
    shutil.copytree(full, crashed)
    for name in ("step_12", "step_16"):
        shutil.rmtree(crashed / "checkpoints" / name)
    for png in PNGS[:2]:
        (crashed / png).unlink()
    (crashed / "summary.json").unlink()
    result = run_shardrec(["train", *common, "--resume", "--out", str(crashed)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "at step 6" in result.stdout
    _check_outputs(crashed, result.stdout, steps=16, evals=2)

    expected = checkpoint_tensors(full / "checkpoints" / "step_16", tmp_path)
    resumed = checkpoint_tensors(crashed / "checkpoints" / "step_16", tmp_path)
    assert sorted(resumed) == sorted(expected)
    assert any("embedding_bags" in k for k in expected) and any("exp_avg" in k for k in expected)
    for key, value in expected.items():
        assert torch.equal(resumed[key], value), key
    assert (
        json.loads((crashed / "summary.json").read_text())["test_auc"]
        == json.loads((full / "summary.json").read_text())["test_auc"]
    )


@pytest.mark.slow
def test_raw_movielens_directory_dcn_forced_row_wise_plain_loop(tmp_path: pathlib.Path) -> None:
    """MovieLens in GroupLens's raw format, DLRM_DCN, every table row_wise, no pipeline."""
    data = write_ml100k(tmp_path / "ml-100k")
    out = tmp_path / "run"
    args = [
        "train",
        "--dataset",
        "movielens-100k",
        "--data-dir",
        str(data),
        "--model",
        "dlrm_dcn",
        "--sharding-type",
        "row_wise",
        "--no-pipeline",
        *SMALL_MODEL,
        "--dcn-num-layers",
        "2",
        "--dcn-low-rank-dim",
        "4",
        "--batch-size",
        "32",
        "--epochs",
        "2",
        "--eval-every",
        "5",
        "--out",
        str(out),
    ]
    result = run_shardrec(args)
    assert result.returncode == 0, result.stderr[-3000:]
    # 600 ratings -> 480 train -> 240 per rank -> 8 batches of 32 per epoch.
    summary = _check_outputs(out, result.stdout, steps=16, evals=4)
    options = summary["options"]
    assert isinstance(options, dict) and options["model"] == "dlrm_dcn"
    plan = json.loads((out / "plan.json").read_text())
    tables = next(iter(plan["plan"].values()))
    assert {t["sharding_type"] for t in tables.values()} == {"row_wise"}
    assert sorted(tables) == sorted(
        f"t_{f}"
        for f in ("user", "item", "genres", "age_bucket", "gender", "occupation", "zip_prefix")
    )
