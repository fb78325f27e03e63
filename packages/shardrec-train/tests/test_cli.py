"""The command line: options declared once, no torch before the arguments are good,
suggestions for mistyped flags, `--version` / `version`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from _train_helpers import SYNTHETIC

from shardrec_train import TrainOptions, build_parser, options_from_namespace
from shardrec_train.cli import FREQUENCY_THRESHOLD, main, unknown_flag_problem
from shardrec_train.loop import EVALS_PER_RUN, boundaries, eval_interval
from shardrec_train.options import (
    EMBEDDING_OPTIMIZERS,
    FORCEABLE_SHARDING_TYPES,
    TORCHRUN_FLAGS,
    fields,
    number_problems,
)
from shardrec_train.versions import DISTRIBUTIONS, version_line, version_report


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (same sys.path as this one)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_help_version_and_argument_errors_import_no_torch(tmp_path: pathlib.Path) -> None:
    """In one fresh process: `--help`, `train --help`, `--version`, a syntax error and a range
    error all answer without importing torch (it took 20-27 s on a loaded machine)."""
    out = tmp_path / "run"
    result = _run_python(
        f"""
        import sys
        from shardrec_train.cli import main
        for argv in (["--help"], ["train", "--help"], ["--version"],
                     ["train", "--dataset", "synthetic", "--batch-size", "x"],
                     ["train", "--dataset", "synthetic", "--epochs", "0", "--out", {str(out)!r}],
                     ["train", "--dataset", "synthetic", "--epoch-count", "3"]):
            try:
                code = main(argv)
            except SystemExit as stop:
                code = stop.code
            print("STATUS", argv[-1], code)
        print("TORCH", "torch" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    status = [line.split()[1:] for line in result.stdout.splitlines() if line.startswith("STATUS")]
    assert status == [
        ["--help", "0"],
        ["--help", "0"],
        ["--version", "0"],
        ["x", "2"],
        [str(out), "2"],
        ["3", "2"],
    ]
    assert "TORCH False" in result.stdout
    assert "--epochs must be >= 1, got 0" in result.stderr
    assert "did you mean --epochs?" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["train", "--epoch-count", "3"],
            "--epoch-count for `shardrec train`; did you mean --epochs?",
        ),
        (
            ["train", "--batchsize=4"],
            "--batchsize for `shardrec train`; did you mean --batch-size?",
        ),
        (["train", "--sharding", "x"], None),  # a unique prefix: argparse takes it
        (["train", "--no-pipelines"], "did you mean --no-pipeline?"),
        (["--verison"], "--verison for `shardrec`; did you mean --version?"),
        (["train", "--zzzzzz"], "--zzzzzz for `shardrec train`"),
        (["preprocess-criteo", "--out-dri", "x"], "did you mean --out-dir?"),
        (["train", "--dataset", "synthetic"], None),
    ],
)
def test_unknown_flag_names_the_closest(args: list[str], expected: str | None) -> None:
    problem = unknown_flag_problem(build_parser(), args)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


def test_unknown_flag_is_one_line_before_other_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in a required flag reports the typo, not 'the following arguments are required'."""
    with pytest.raises(SystemExit) as stop:
        main(["train", "--datset", "synthetic"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "shardrec: error: unrecognized argument --datset for `shardrec train`; "
        "did you mean --dataset?"
    ]


def test_every_field_is_one_flag_and_parses_back(tmp_path: pathlib.Path) -> None:
    """Each TrainOptions field appears once in `train --help` and parses into its annotated
    type; torchrun's flags are exactly the fields marked for it."""
    parser = build_parser()
    train = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "train"
    ]
    dests = [a.dest for a in train._actions if a.dest != "help"]
    assert sorted(dests) == sorted(f.name for f in dataclasses.fields(TrainOptions))
    opts = options_from_namespace(
        parser.parse_args(
            ["train", *SYNTHETIC, "--out", str(tmp_path), "--sharding-type", "row_wise"]
        )
    )
    for f in fields():
        value = getattr(opts, f.name)
        assert value is None or isinstance(value, f.kind), (f.name, value)
    assert opts.embedding_dim == 8 and opts.over_arch == (16, 1) and opts.epochs == 1
    assert opts.dataset_options[0] == ("num_embeddings", "64")
    assert opts.eval_every is None and opts.pipeline is True and opts.out == tmp_path
    assert set(TORCHRUN_FLAGS) == {
        "nnodes",
        "node_rank",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "master_addr",
        "master_port",
        "max_restarts",
    }
    assert number_problems(opts) == []


def test_presets_fill_what_is_left_out(tmp_path: pathlib.Path) -> None:
    ns = build_parser().parse_args(["train", "--dataset", "movielens-100k", "--epochs", "2"])
    opts = options_from_namespace(ns)
    assert (opts.model, opts.embedding_dim, opts.epochs, opts.batch_size) == (
        "dlrm_dcn",
        32,
        2,
        512,
    )
    assert opts.dense_arch == (64, 32)
    assert opts.out.parent == pathlib.Path("runs") and opts.out.name.startswith("movielens-100k-")


def test_choice_lists_match_the_enums() -> None:
    """The torch-free spellings equal the enums they stand for; grid_shard is not offered
    because it cannot be forced (and the help no longer lists it)."""
    from shardrec_data.criteo_preprocess import DEFAULT_FREQUENCY_THRESHOLD
    from shardrec_optim import EmbOptimType
    from shardrec_planner import ShardingType
    from shardrec_train.sharding import forced_generators

    assert set(EMBEDDING_OPTIMIZERS) == {m.value for m in EmbOptimType}
    assert set(FORCEABLE_SHARDING_TYPES) == {m.value for m in ShardingType} - {"grid_shard"}
    for name in FORCEABLE_SHARDING_TYPES:
        assert forced_generators(ShardingType(name), ["t"], 2, 2)
    assert FREQUENCY_THRESHOLD == DEFAULT_FREQUENCY_THRESHOLD
    assert "grid_shard" not in build_parser().format_help()


@pytest.mark.parametrize("total", [1, 5, 9, 10, 11, 99, 100, 101, 1234])
def test_default_evaluation_schedule_draws_a_curve(total: int) -> None:
    """Without --eval-every: about EVALS_PER_RUN evaluations, never more, the last at the end."""
    every = eval_interval(None, total)
    evals = [s for s in boundaries(0, total, every, 0) if s % every == 0 or s == total]
    assert evals[-1] == total
    assert len(evals) <= EVALS_PER_RUN
    assert len(evals) >= min(total, EVALS_PER_RUN // 2 + 1)
    if total % EVALS_PER_RUN == 0:
        assert len(evals) == EVALS_PER_RUN
    assert eval_interval(0, total) == 0 and eval_interval(7, total) == 7


def test_version_line_and_report() -> None:
    import contextlib
    import importlib.metadata

    import torch

    from shardrec_embedding._native import native_available
    from shardrec_embedding.triton import triton_available
    from shardrec_jagged import fbgemm_available
    from shardrec_optim.fbgemm_kernels import fbgemm_tbe_available

    installed = {}
    for name in DISTRIBUTIONS:  # not all installed: e.g. the umbrella in train's own venv
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            installed[name] = importlib.metadata.version(name)
    # The umbrella's version where it is installed, else this package's.
    if "shardrec" in installed:
        assert version_line() == f"shardrec {installed['shardrec']}"
    else:
        assert version_line() == f"shardrec-train {installed['shardrec-train']}"
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in version_report().splitlines())
    assert {n: rows[n] for n in DISTRIBUTIONS if n in rows} == installed
    assert rows["torch"] == str(torch.__version__)
    jagged = rows["jagged kernels"]
    assert (jagged == "fbgemm") is fbgemm_available()
    assert fbgemm_available() or jagged.startswith("torch-native")
    # the fused update's auto order (shardrec_optim.rules): native, then fbgemm, then torch
    backward = rows["fused embedding backward"]
    if native_available():
        assert backward.startswith("native C kernels"), backward
    else:
        assert (backward == "fbgemm") is fbgemm_tbe_available()
        assert fbgemm_tbe_available() or backward.startswith("torch-native")
    assert (rows["CPU pooled lookup"] == "native C kernels") is native_available()
    assert (rows["CUDA pooled lookup"] == "triton") is triton_available()


def test_version_command_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert "shardrec-train" in out and "torch" in out and "jagged kernels" in out
