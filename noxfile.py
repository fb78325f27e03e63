"""Developer sessions for the shardrec monorepo; `nox -s tests` is what CI runs."""

from __future__ import annotations

import os
import pathlib
import tomllib

import nox

ROOT = pathlib.Path(__file__).parent
PACKAGES_DIR = ROOT / "packages"
# torch is pinned: on CPU machines the 2.13.0 CPU wheel is local, while an unpinned request
# resolves to a multi-GB CUDA build. fbgemm-gpu-cpu 1.8.0 is the build that loads with it.
TORCH = "torch==2.13.0"
FBGEMM = "fbgemm-gpu-cpu==1.8.0"
# Triton runs its kernels in its CPU interpreter (TRITON_INTERPRET=1) when no GPU is present.
TRITON = "triton==3.9.0"
TORCHREC = "torchrec==1.8.0"
TORCHREC_DEPS = ["tensordict", "torchmetrics==1.0.3", "pyre-extensions", "tqdm", "iopath"]

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


def _meta(dist: str) -> dict[str, object]:
    return tomllib.loads((PACKAGES_DIR / dist / "pyproject.toml").read_text())


def _local_deps(dist: str) -> list[str]:
    """Sibling distributions `dist` declares (runtime and test extras), not transitively."""
    project = _meta(dist)["project"]
    assert isinstance(project, dict)
    reqs = list(project.get("dependencies", [])) + list(
        project.get("optional-dependencies", {}).get("test", [])
    )
    names = [r.split(">")[0].split("=")[0].split("<")[0].strip() for r in reqs]
    return [n for n in names if (PACKAGES_DIR / n).is_dir()]


# Hypothesis draws the same examples on every nox run (conftest.py), so CI is not a lottery.
os.environ.setdefault("SHARDREC_HYPOTHESIS_PROFILE", "ci")


def _closure(dist: str) -> list[str]:
    seen: list[str] = []
    todo = [dist]
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.append(d)
            todo.extend(_local_deps(d))
    return seen


PACKAGES = sorted(p.name for p in PACKAGES_DIR.iterdir() if (p / "pyproject.toml").is_file())


def _install_packages(session: nox.Session, dists: list[str], extra: str = "[test]") -> None:
    session.install(TORCH)
    args: list[str] = []
    for d in dists:
        args += ["-e", f"{PACKAGES_DIR / d}{extra}"]
    session.install(*args)


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
    session.install(FBGEMM, TRITON, "numpy")
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
    session.install(TRITON, "numpy")  # numpy: the interpreter needs it
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
    """mypy --strict over every package's source."""
    _install_packages(session, PACKAGES)
    session.install("mypy>=1.10")
    mods = [p.replace("-", "_") for p in PACKAGES]
    session.run(
        "mypy", "--config-file", str(ROOT / "mypy.ini"), *[a for m in mods for a in ("-p", m)]
    )


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


@nox.session
def bench(session: nox.Session) -> None:
    """Run benchmarks/ side by side with TorchRec 1.8 (optional; not part of `tests`)."""
    _install_packages(session, PACKAGES, extra="")
    # scikit-learn: the logistic-regression baseline of benchmarks/movielens_baseline.py.
    session.install(FBGEMM, *TORCHREC_DEPS, "scikit-learn")
    # torchrec declares the CUDA fbgemm-gpu, which breaks its import here: install it alone.
    session.install("--no-deps", TORCHREC)
    scripts = session.posargs or sorted(str(p) for p in (ROOT / "benchmarks").glob("*.py"))
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
    import shutil

    _install_packages(session, _closure("shardrec-train"), extra="")
    out = pathlib.Path(session.create_tmp()) / "movielens-100k"
    if out.exists():
        shutil.rmtree(out)  # a fresh run each time (an old run's checkpoints would be refused)
    session.run(
        "shardrec", "train", "--dataset", "movielens-100k", "--nproc-per-node", "2",
        "--out", str(out), *session.posargs,
    )  # fmt: skip


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """Everything CI checks: lint, layers, typecheck, every package's unit tests, integration."""
    for name in ["lint", "layers", "typecheck", *[f"unit({p})" for p in PACKAGES]]:
        session.notify(name)
    session.notify("fbgemm")
    session.notify("integration")
