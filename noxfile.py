"""Developer sessions for the shardrec monorepo; `nox -s tests` is what CI runs.

Venvs are made and filled by uv (`pip install nox uv`). torch is installed once, by pip and
pinned, into `.nox/_torch-*` and every session venv sees it through a .pth file: uv never
resolves torch (an unpinned resolution picks a multi-GB CUDA build; pip takes the local CPU
wheel where the machine has one). Everything else in a venv is what its packages declare.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

import nox

ROOT = pathlib.Path(__file__).parent
PACKAGES_DIR = ROOT / "packages"
# Checks that need TorchRec's own material (the conformance suite, the seed tutorials) find it
# beside the repository, as in CI; without it they skip.
SHARED = ROOT.parent / "shared"
# torch is pinned: on CPU machines the 2.13.0 CPU wheel is local, while an unpinned request
# resolves to a multi-GB CUDA build. fbgemm-gpu-cpu 1.8.0 is the build that loads with it.
TORCH_VERSION = "2.13.0"
TORCH = f"torch=={TORCH_VERSION}"
FBGEMM = "fbgemm-gpu-cpu==1.8.0"
# Triton runs its kernels in its CPU interpreter (TRITON_INTERPRET=1) when no GPU is present.
TRITON = "triton==3.9.0"
TORCHREC = "torchrec==1.8.0"
TORCHREC_DEPS = ["tensordict", "torchmetrics==1.0.3", "pyre-extensions", "tqdm", "iopath"]
# What the conformance runner's python needs besides shardrec (run.sh's header).
# pyre-extensions, numpy and tensordict: TorchRec's test-support modules import them (without
# them the KJT, Criteo and planner test files cannot be collected or build their test models).
CONFORMANCE_DEPS = [
    "pytest>=8", "pytest-timeout>=2", "hypothesis>=6", "parameterized", "pyre-extensions", "numpy",
    "tensordict", FBGEMM,
]  # fmt: skip
CONFORMANCE_FLOOR = ROOT / "tools" / "conformance_floor.json"
CACHE = ROOT / ".nox"
TORCH_DIR = CACHE / f"_torch-{TORCH_VERSION}-py{sys.version_info.major}{sys.version_info.minor}"

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "uv|virtualenv"

# Hypothesis draws the same examples on every nox run (conftest.py), so CI is not a lottery.
os.environ.setdefault("SHARDREC_HYPOTHESIS_PROFILE", "ci")


def _meta(dist: str) -> dict[str, object]:
    return tomllib.loads((PACKAGES_DIR / dist / "pyproject.toml").read_text())


def _req_name(req: str) -> str:
    for sep in "<>=!~[; ":
        req = req.split(sep)[0]
    return req.strip()


def _local_deps(dist: str, extras: bool = True) -> list[str]:
    """Sibling distributions `dist` declares (runtime, and the test extra), not transitively."""
    project = _meta(dist)["project"]
    assert isinstance(project, dict)
    reqs = list(project.get("dependencies", []))
    if extras:
        reqs += list(project.get("optional-dependencies", {}).get("test", []))
    names = [_req_name(r) for r in reqs]
    return [n for n in names if (PACKAGES_DIR / n).is_dir()]


def _closure(dist: str, extras: bool = True) -> list[str]:
    seen: list[str] = []
    todo = [dist]
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.append(d)
            todo.extend(_local_deps(d, extras))
    return seen


PACKAGES = sorted(p.name for p in PACKAGES_DIR.iterdir() if (p / "pyproject.toml").is_file())


def _shared_torch() -> pathlib.Path:
    """Install the pinned torch (and its own dependencies) once, with pip, into TORCH_DIR."""
    done = TORCH_DIR / ".complete"
    if done.exists():
        return TORCH_DIR
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "_torch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions: one installs, the others wait
        if not done.exists():
            tmp = TORCH_DIR.with_name(TORCH_DIR.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"installing {TORCH} once into {TORCH_DIR} (pip) ...", flush=True)
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp), TORCH]
            subprocess.run(cmd, check=True)
            shutil.rmtree(TORCH_DIR, ignore_errors=True)
            tmp.rename(TORCH_DIR)
            done.touch()
    return TORCH_DIR


def _expose_torch(session: nox.Session, python: str = "python") -> None:
    """Put the shared torch on the venv's path (a .pth file in its site-packages)."""
    torch_dir = _shared_torch()
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = session.run(python, "-c", code, silent=True, external=True)
    site = pathlib.Path(str(out).strip().splitlines()[-1])
    (site / "_shardrec_shared_torch.pth").write_text(f"{torch_dir}\n")


def _excludes() -> str:
    """A uv --excludes file naming torch: the venvs take the shared one instead."""
    CACHE.mkdir(exist_ok=True)
    path = CACHE / "_uv_excludes.txt"
    if not path.exists():
        path.write_text("torch\n")
    return str(path)


def _install(session: nox.Session, *reqs: str) -> None:
    """uv pip install with torch left out of the resolution, then expose the shared torch.
    Without uv (nox's virtualenv fallback), pip installs the pinned torch into the venv."""
    if session.venv_backend != "uv":
        session.install(TORCH, *reqs)
        return
    session.install("--excludes", _excludes(), *reqs)
    _expose_torch(session)


def _install_packages(session: nox.Session, dists: list[str], extra: str = "[test]") -> None:
    args: list[str] = []
    for d in dists:
        args += ["-e", f"{PACKAGES_DIR / d}{extra}"]
    _install(session, *args)


@nox.session
@nox.parametrize("pkg", PACKAGES, ids=PACKAGES)
def unit(session: nox.Session, pkg: str) -> None:
    """Unit tests of one package, in a venv holding only it and its declared dependencies."""
    _install_packages(session, _closure(pkg))
    session.run("pytest", "-q", str(PACKAGES_DIR / pkg / "tests"), *session.posargs)


@nox.session
def fbgemm(session: nox.Session) -> None:
    """Backend-parity tests (marked `fbgemm`) with fbgemm-gpu-cpu installed beside torch."""
    _install_packages(session, PACKAGES)
    # The Triton kernel tests ride along (in Triton's CPU interpreter; numpy: the interpreter
    # needs it): a session of their own would pay a fresh venv for well under a minute of tests.
    _install(session, FBGEMM, TRITON, "numpy")
    paths = [str(PACKAGES_DIR), str(ROOT / "integration_tests")]
    session.run(
        "pytest", "-q", "-m", "fbgemm or triton", *paths, *session.posargs,
        env={"TRITON_INTERPRET": "1"},
    )  # fmt: skip


def _cuda_devices(session: nox.Session) -> int:
    """GPUs visible to the current environment's torch (0 without CUDA or without torch)."""
    probe = (
        "try:\n import torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
        "except Exception:\n n = 0\nprint(n)"
    )
    out = session.run("python", "-c", probe, silent=True)
    return int(str(out).strip().splitlines()[-1])


def _sources_env() -> dict[str, str]:
    """PYTHONPATH with every package's src/ (spawned rank processes inherit it)."""
    paths = [str(PACKAGES_DIR / p / "src") for p in PACKAGES]
    return {"PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Unit tests on CUDA (files test_gpu_*.py and test_triton_*.py), current environment."""
    if _cuda_devices(session) == 0:
        session.skip("no CUDA device visible: the gpu tests need one")
    files = sorted(
        str(f)
        for pattern in ("test_gpu_*.py", "test_triton_*.py")
        for f in PACKAGES_DIR.glob(f"*/tests/{pattern}")
    )
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-m",
        "gpu or triton",
        *files,
        *session.posargs,
        env=_sources_env(),
    )


@nox.session(python=False)
def integration_nccl(session: nox.Session) -> None:
    """The integration scenarios over NCCL: world 1 on one GPU; worlds 1..min(GPUs, 4) when
    at least two GPUs are visible (one rank per GPU)."""
    if _cuda_devices(session) == 0:
        session.skip("no CUDA device visible: NCCL needs one GPU per rank")
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        str(ROOT / "integration_tests" / "test_nccl_scenarios.py"),
        *session.posargs,
        env=_sources_env(),
    )


@nox.session
def triton(session: nox.Session) -> None:
    """The Triton kernels (tests marked `triton`) on CPU, in Triton's interpreter."""
    _install_packages(session, _closure("shardrec-embedding"))
    _install(session, TRITON, "numpy")  # numpy: the interpreter needs it
    session.run(
        "pytest",
        "-q",
        "-m",
        "triton",
        str(PACKAGES_DIR / "shardrec-embedding" / "tests"),
        *session.posargs,
        env={"TRITON_INTERPRET": "1"},
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Multi-process scenarios over real gloo process groups (integration_tests/)."""
    _install_packages(session, PACKAGES)
    session.run("pytest", "-q", str(ROOT / "integration_tests"), *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's source (incremental: its cache lives in .nox/)."""
    _install_packages(session, PACKAGES)
    _install(session, "mypy>=1.10")
    mods = [p.replace("-", "_") for p in PACKAGES]
    session.run(
        "mypy", "--config-file", str(ROOT / "mypy.ini"), "--cache-dir", str(CACHE / "_mypy_cache"),
        "--sqlite-cache", *[a for m in mods for a in ("-p", m)],
    )  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))


@nox.session
def layers(session: nox.Session) -> None:
    """Fail when a package imports a same-or-higher layer or an undeclared sibling."""
    session.install("pytest>=8", "pytest-timeout>=2")
    session.run("pytest", "-q", str(ROOT / "tools" / "tests"))
    session.run("python", str(ROOT / "tools" / "check_layers.py"))


def _uv() -> str:
    """The uv that nox found (on PATH, or the one installed beside nox)."""
    if not nox.virtualenv.HAS_UV:
        raise RuntimeError("this session needs uv: python3 -m pip install 'uv>=0.13'")
    return str(nox.virtualenv.UV)


def _build_all(session: nox.Session, out: pathlib.Path, sdist: bool = True) -> None:
    """A wheel (and an sdist) of every package into `out` (uv build, hatchling)."""
    out.mkdir(parents=True, exist_ok=True)
    kinds = [] if sdist else ["--wheel"]
    for dist in PACKAGES:
        session.run(_uv(), "build", "-q", *kinds, "--out-dir", str(out), str(PACKAGES_DIR / dist))


@nox.session(python=False)
def build(session: nox.Session) -> None:
    """A wheel and an sdist of every package into dist/: `pip install --find-links dist X`."""
    dist = ROOT / "dist"
    for old in [*dist.glob("shardrec*.whl"), *dist.glob("shardrec*.tar.gz")]:
        old.unlink()
    _build_all(session, dist)
    session.log(f"built {len(list(dist.glob('*.whl')))} wheels and sdists into {dist}")


TEST_ONLY_DISTRIBUTIONS = frozenset({"pytest", "hypothesis", "pytest-timeout", "parameterized"})


@nox.session(python=False)
def wheels(session: nox.Session) -> None:
    """Build every wheel, install `shardrec` alone from them into a fresh venv (torch beside it,
    nothing from the repository on the path) and run a tutorial there; a leaf package installs
    only itself."""
    tmp = pathlib.Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _build_all(session, dist, sdist=False)
    cases = {"shardrec": _closure("shardrec", extras=False), "shardrec-jagged": ["shardrec-jagged"]}
    for top, expected in cases.items():
        venv = tmp / f"venv-{top}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run(_uv(), "venv", "-q", "-p", sys.executable, str(venv))
        py = str(venv / "bin" / "python")
        _expose_torch(session, py)
        # Only the built wheels may provide shardrec-*: no index holds them, and torch is the
        # shared one (excluded from the resolution).
        session.run(
            _uv(), "pip", "install", "-q", "-p", py, "--excludes", _excludes(),
            "--find-links", str(dist), top,
        )  # fmt: skip
        names = "import importlib.metadata as m; print(*sorted(d.name for d in m.distributions()))"
        listing = session.run(py, "-c", names, silent=True, external=True)
        got = sorted(n for n in str(listing).split() if n.startswith("shardrec"))
        if got != sorted(expected):
            session.error(f"installing {top} from wheels gave {got}, expected {sorted(expected)}")
        session.log(f"{top} from wheels: {len(got)} shardrec distributions, as declared")
        runners = sorted(n for n in str(listing).split() if n in TEST_ONLY_DISTRIBUTIONS)
        if runners:
            session.error(f"installing {top} from wheels pulled test-only distributions {runners}")
    py = str(tmp / "venv-shardrec" / "bin" / "python")
    env = {"PYTHONPATH": "", "SHARDREC_NATIVE": os.environ.get("SHARDREC_NATIVE", "")}
    with session.chdir(tmp):  # away from the repository: only the installed wheels import
        session.run(py, str(ROOT / "examples" / "tutorial_intro.py"), env=env, external=True)
        # TorchRec's test-support paths import without pytest installed.
        check = "import shardrec.distributed.test_utils, shardrec.test_utils"
        session.run(py, "-c", check, env=env, external=True)


def _conformance_counts(works: list[pathlib.Path], files: list[str]) -> dict[str, int]:
    """Per file: the TorchRec-passing tests (run.sh's baseline) that pass on shardrec too."""
    passing: dict[str, int] = {}
    for line in (SHARED / "torchrec-conformance" / "torchrec_passing.tsv").read_text().splitlines():
        f = line.split("\t")[0]
        passing[f] = passing.get(f, 0) + 1
    lost: dict[str, int] = {}
    for work in works:
        for line in (work / "results" / "lost_srl.tsv").read_text().splitlines():
            f = line.split("\t")[0]
            lost[f] = lost.get(f, 0) + 1
    return {f: passing.get(f, 0) - lost.get(f, 0) for f in files}


@nox.session
def conformance(session: nox.Session) -> None:
    """TorchRec 1.8's own tests ported to shardrec (../shared/torchrec-conformance/run.sh, lenient
    port); fails when a file's count of TorchRec-passing tests that pass here drops below
    tools/conformance_floor.json. `-- FILE...` runs those files only. The files are split over
    SHARDREC_CONFORMANCE_JOBS (default 2) runners at once, each file in its own pytest."""
    run_sh = SHARED / "torchrec-conformance" / "run.sh"
    if not run_sh.is_file():
        session.skip(f"{run_sh} is missing: the TorchRec conformance suite lives in ../shared")
    floor = json.loads(CONFORMANCE_FLOOR.read_text())
    files = list(session.posargs) or list(floor["files"])
    _install_packages(session, PACKAGES, extra="")
    _install(session, *CONFORMANCE_DEPS)
    jobs = max(1, min(len(files), int(os.environ.get("SHARDREC_CONFORMANCE_JOBS", "2"))))
    # Outside the repository: pytest must not take the repository's pytest settings there.
    base = pathlib.Path(tempfile.gettempdir()) / f"shardrec-conformance-{ROOT.resolve().name}"
    works = [base / f"part{k}" for k in range(jobs)]
    py = str(pathlib.Path(session.bin) / "python")
    base.mkdir(exist_ok=True)
    runs = []
    for k, work in enumerate(works):
        part = files[k::jobs]  # neighbours (similar cost) go to different runners
        env = {**os.environ, "PY": py, "W": str(work), "FILES": " ".join(part), "PYTHONPATH": ""}
        log = open(work.with_suffix(".log"), "w+b")  # noqa: SIM115 (closed below)
        runs.append((subprocess.Popen(["bash", str(run_sh)], env=env, stdout=log, stderr=log), log))
    for proc, log in runs:
        proc.wait()
        log.seek(0)
        print(log.read().decode(errors="replace"), flush=True)
        log.close()
    counts = _conformance_counts(works, files)
    low = {f: (n, floor["files"].get(f, 0)) for f, n in counts.items()}
    low = {f: v for f, v in low.items() if v[0] < v[1]}
    total, want = sum(counts.values()), sum(floor["files"].get(f, 0) for f in files)
    session.log(f"conformance: {total} TorchRec-passing tests pass on shardrec (floor {want})")
    if low:
        rows = "\n".join(f"  {f}: {n} < floor {m}" for f, (n, m) in low.items())
        session.error(f"conformance fell below its floor ({CONFORMANCE_FLOOR.name}):\n{rows}")
    if total > want:
        session.log(f"above the floor: raise it in {CONFORMANCE_FLOOR.relative_to(ROOT)}")


@nox.session
def bench(session: nox.Session) -> None:
    """Run benchmarks/ side by side with TorchRec 1.8 (optional; not part of `tests`).
    `-- benchmarks/tiered_beyond_ram.py` runs the beyond-RAM run, which the default leaves out."""
    _install_packages(session, PACKAGES, extra="")
    # scikit-learn: the logistic-regression baseline of benchmarks/movielens_baseline.py.
    _install(session, FBGEMM, *TORCHREC_DEPS, "scikit-learn")
    # torchrec declares the CUDA fbgemm-gpu, which breaks its import here: install it alone.
    session.install("--no-deps", TORCHREC)
    # The beyond-RAM run writes a 30 GB store for 10+ minutes: only when named.
    everything = sorted(
        str(p) for p in (ROOT / "benchmarks").glob("*.py") if p.name != "tiered_beyond_ram.py"
    )
    scripts = session.posargs or everything
    for script in scripts:
        session.run("python", script)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: for now, build and print KeyedJaggedTensors from a Criteo-shaped batch."""
    _install_packages(session, PACKAGES, extra="")
    session.run("python", str(ROOT / "examples" / "criteo_kjt_demo.py"))


@nox.session
def movielens(session: nox.Session) -> None:
    """The main job: DLRM_DCN on MovieLens-100k, 2 gloo ranks, plan report to test AUC (< 5 min)."""
    _install_packages(session, _closure("shardrec-train", extras=False), extra="")
    out = pathlib.Path(session.create_tmp()) / "movielens-100k"
    if out.exists():
        shutil.rmtree(out)  # a fresh run each time (an old run's checkpoints would be refused)
    session.run(
        "shardrec", "train", "--dataset", "movielens-100k", "--nproc-per-node", "2",
        "--out", str(out), *session.posargs,
    )  # fmt: skip


# Lines of a run's output that are warnings: Python's `warnings` (`file:line: XWarning: ...`) and
# torch's logging (`[rank0]:W1128 12:00:00.000 ...` under torchrun, `W1128 ...` without a rank).
_WARNING_LINE = re.compile(r"\w+Warning: |^(\[rank\d+\]:)?W\d{4} ", re.MULTILINE)
# Warnings the fresh run may still print, each with its owner and reason; none today.
_KNOWN_WARNINGS: tuple[str, ...] = ()


@nox.session
def movielens_fresh(session: nox.Session) -> None:
    """The main job from an EMPTY dataset cache, as on a brand-new machine: in a uv venv like
    `movielens`'s, `shardrec train --dataset movielens-100k` (2 ranks, 30 steps) downloads
    MovieLens-100k into a fresh cache directory and must reach its `test AUC` line; the run's
    output must carry no warning (beyond _KNOWN_WARNINGS)."""
    _install_packages(session, _closure("shardrec-train", extras=False), extra="")
    tmp = pathlib.Path(session.create_tmp()).resolve()
    cache, out = tmp / "empty-data-cache", tmp / "run"
    for old in (cache, out):
        shutil.rmtree(old, ignore_errors=True)
    cache.mkdir()
    log = session.run(
        "shardrec", "train", "--dataset", "movielens-100k", "--nproc-per-node", "2",
        "--epochs", "1", "--max-steps", "30", "--eval-every", "0", "--out", str(out),
        env={"SHARDREC_DATA_CACHE": str(cache)}, silent=True,
    )  # fmt: skip
    text = str(log)
    print(text, flush=True)
    if not (cache / "movielens").is_dir() or "movielens-100k: cached" not in text:
        session.error(f"the run did not download MovieLens-100k into the empty cache {cache}")
    if not re.search(r"^test AUC 0\.\d{4}$", text, re.MULTILINE):
        session.error("the run printed no `test AUC` line")
    warned = [
        line
        for line in text.splitlines()
        if _WARNING_LINE.search(line) and not any(k in line for k in _KNOWN_WARNINGS)
    ]
    if warned:
        session.error("the run printed warnings:\n" + "\n".join(warned))


# The sessions `tests` runs, longest first (measured, docs/testing.md) so that the parallel
# slots finish together.
# Longest first (measured, docs/testing.md), so the two job slots finish together.
_LONG_UNITS = ("shardrec-train", "shardrec-sharding", "shardrec-dmp", "shardrec-embedding")
TEST_SESSIONS = [
    "conformance",
    "integration",
    *[f"unit({p})" for p in _LONG_UNITS[:3]],
    "typecheck",
    *[f"unit({p})" for p in _LONG_UNITS[3:]],
    "fbgemm",
    "movielens_fresh",
    *[f"unit({p})" for p in PACKAGES if p not in _LONG_UNITS],
    "wheels",
    "lint",
    "layers",
]  # fmt: skip


def _outcome(rc: int, report: pathlib.Path) -> str:
    """passed, skipped or failed, from the child nox's --report file."""
    try:
        results = [s["result"] for s in json.loads(report.read_text())["sessions"]]
    except (OSError, ValueError, KeyError):
        results = []
    if rc != 0 or not results or any(r not in ("success", "skipped") for r in results):
        return "failed"
    return "skipped" if all(r == "skipped" for r in results) else "passed"


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """Everything CI checks, sessions in parallel (SHARDREC_NOX_JOBS, default 2): lint, layers,
    typecheck, every package's unit tests, fbgemm, integration, wheels, conformance."""
    names = list(session.posargs) or TEST_SESSIONS
    jobs = max(1, int(os.environ.get("SHARDREC_NOX_JOBS", "2")))
    logs = CACHE / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    session.log(f"running {len(names)} sessions, {jobs} at a time: {', '.join(names)}")
    _shared_torch()  # before the fan-out: every session venv links this one install
    t0 = time.monotonic()
    todo = list(names)
    running: dict[str, tuple[subprocess.Popen[bytes], float, pathlib.Path]] = {}
    done: dict[str, tuple[str, float]] = {}
    while todo or running:
        while todo and len(running) < jobs:
            name = todo.pop(0)
            log = logs / (name.replace("(", "-").replace(")", "") + ".log")
            cmd = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", name]
            cmd += ["--report", str(log.with_suffix(".json"))]
            with open(log, "wb") as fh:
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
            running[name] = (proc, time.monotonic(), log)
            session.log(f"started {name}")
        time.sleep(0.5)
        for name, (proc, start, log) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del running[name]
            outcome, secs = _outcome(rc, log.with_suffix(".json")), time.monotonic() - start
            done[name] = (outcome, secs)
            print(f"\n===== {name}: {outcome} in {secs:.0f} s (log {log}) =====", flush=True)
            print(log.read_text(errors="replace"), flush=True)
    print("\nsession                          outcome   time", flush=True)
    for name in names:
        outcome, secs = done[name]
        print(f"{name:<32} {outcome:<9} {secs:5.0f} s", flush=True)
    n = {k: sum(1 for o, _ in done.values() if o == k) for k in ("passed", "failed", "skipped")}
    print(f"wall time {time.monotonic() - t0:.0f} s with {jobs} jobs", flush=True)
    print(
        f"sessions: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped", flush=True
    )
    if n["failed"]:
        failed = [k for k, (o, _) in done.items() if o == "failed"]
        session.error(f"{n['failed']} sessions failed: {', '.join(failed)}")
