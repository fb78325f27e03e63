"""Every bad argument: one line on stderr naming the value, exit status 2, no process started."""

from __future__ import annotations

import pathlib

import pytest
from _train_helpers import SYNTHETIC, run_shardrec

import shardrec_train.cli as cli


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record (instead of run) any torchrun launch; tests assert it stays empty."""
    launched: list[list[str]] = []

    def fake_launch(cmd: list[str], nproc_per_node: int, threads: int | None = None) -> int:
        launched.append(list(cmd))
        return 0

    monkeypatch.setattr(cli, "launch", fake_launch)
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    return launched


def _call(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    try:
        code = cli.main(args)
    except SystemExit as stop:  # argparse's own errors
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()]


def _synthetic(tmp_path: pathlib.Path, *extra: str) -> list[str]:
    return ["train", *SYNTHETIC, "--out", str(tmp_path / "run"), *extra]


BAD = [
    # (extra args, text the one error line must contain)
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--epochs", "-1"], "--epochs must be >= 1, got -1"),
    (["--nproc-per-node", "0"], "--nproc-per-node must be >= 1, got 0"),
    (["--eval-every", "-5"], "--eval-every must be >= 0, got -5"),
    (["--learning-rate", "0"], "--learning-rate must be a finite number > 0, got 0.0"),
    (["--embedding-lr", "-0.1"], "--embedding-lr must be a finite number > 0, got -0.1"),
    (["--dense-arch", "16,4"], "--dense-arch 16,4 must end with --embedding-dim 8"),
    (["--over-arch", "16,2"], "--over-arch 16,2 must end with 1"),
    (["--dense-arch", "16,x"], "'16,x'"),
    (["--batch-size", "many"], "'many'"),
    (["--optimizer", "rmsprop"], "'rmsprop'"),
    (
        ["--sharding-type", "grid_shard"],
        "invalid choice: 'grid_shard' (choose from 'data_parallel'",
    ),
    (["--sharding-type", "diagonal"], "'diagonal'"),
    (["--backend", "mpi"], "'mpi'"),
    (["--dataset-option", "colour=red"], "'colour'"),
    (["--dataset-option", "noequals"], "'noequals'"),
    (["--dataset-option", "num_embeddings=0"], "num_embeddings must be >= 1, got 0"),
    (["--resume"], "--resume: no checkpoint under"),
    (["--collective-timeout", "0"], "--collective-timeout must be a finite number > 0, got 0"),
    (["--collective-timeout", "-5"], "--collective-timeout must be a finite number > 0, got -5.0"),
    (["--collective-timeout", "nan"], "--collective-timeout must be a finite number > 0, got nan"),
    (["--collective-timeout", "inf"], "--collective-timeout must be a finite number > 0, got inf"),
    (["--collective-timeout", "soon"], "'soon'"),
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (
        ["--sharding-type", "table_wise", "--nproc-per-node", "5"],
        "world size 5 is larger than the 4 tables allow",
    ),
    (
        ["--sharding-type", "column_wise", "--nproc-per-node", "3"],
        "3 does not divide --embedding-dim 8",
    ),
    (
        [
            "--sharding-type",
            "row_wise",
            "--nproc-per-node",
            "3",
            "--dataset-option",
            "num_embeddings=2",
        ],
        "'cat_0' (2 rows) into 3 row blocks",
    ),
    (["--nproc-per-node", "200"], "test split has 128 samples, fewer than the world size 200"),
]


@pytest.mark.parametrize(("extra", "expected"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_argument_is_one_line_and_exit_2(
    extra: list[str],
    expected: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    no_launch: list[list[str]],
) -> None:
    code, lines = _call(_synthetic(tmp_path, *extra), capsys)
    assert code == 2
    assert len(lines) == 1, lines
    assert "error:" in lines[0] and expected in lines[0], lines[0]
    assert no_launch == []


def test_unknown_dataset(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    code, lines = _call(["train", "--dataset", "imagenet", "--out", str(tmp_path)], capsys)
    assert code == 2 and len(lines) == 1
    assert "'imagenet'" in lines[0] and "movielens-100k" in lines[0]
    assert no_launch == []


@pytest.mark.parametrize("dataset", ["criteo-tsv", "movielens-100k"])
def test_missing_data_dir(
    dataset: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    no_launch: list[list[str]],
) -> None:
    missing = tmp_path / "nowhere"
    args = ["train", "--dataset", dataset, "--data-dir", str(missing), "--out", str(tmp_path / "r")]
    code, lines = _call(args, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert str(missing) in lines[0]
    assert no_launch == []


def test_criteo_npy_needs_data_dir(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    code, lines = _call(["train", "--dataset", "criteo-npy", "--out", str(tmp_path)], capsys)
    assert code == 2 and len(lines) == 1 and "data_dir" in lines[0]
    assert no_launch == []


def test_nccl_without_gpus(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    no_launch: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    code, lines = _call(_synthetic(tmp_path, "--backend", "nccl"), capsys)
    assert code == 2 and len(lines) == 1 and "--backend nccl needs CUDA GPUs" in lines[0]
    assert no_launch == []


def test_old_checkpoints_without_resume(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    (tmp_path / "run" / "checkpoints" / "step_4").mkdir(parents=True)
    code, lines = _call(_synthetic(tmp_path), capsys)
    assert code == 2 and len(lines) == 1
    assert "already holds checkpoints (latest step_4)" in lines[0]
    assert no_launch == []


def test_several_problems_one_line_each(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    code, lines = _call(_synthetic(tmp_path, "--batch-size", "0", "--epochs", "0"), capsys)
    assert code == 2
    assert lines == [
        "shardrec train: error: --epochs must be >= 1, got 0",
        "shardrec train: error: --batch-size must be >= 1, got 0",
    ]
    assert no_launch == []


def test_good_arguments_launch_torchrun_once(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    code, lines = _call(_synthetic(tmp_path, "--nproc-per-node", "3"), capsys)
    assert code == 0 and lines == []
    [cmd] = no_launch
    i = cmd.index("torch.distributed.run")
    assert cmd[i + 1 : i + 4] == ["--nproc-per-node", "3", "--standalone"]
    assert cmd[-2:] == ["--out", str((tmp_path / "run").resolve())]
    assert cmd[cmd.index("-m", i) + 1 : cmd.index("-m", i) + 3] == ["shardrec_train", "train"]


def test_multi_node_flags_pass_through(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], no_launch: list[list[str]]
) -> None:
    extra = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400"]
    code, _ = _call(_synthetic(tmp_path, *extra), capsys)
    assert code == 0
    [cmd] = no_launch
    head = cmd[: cmd.index("shardrec_train")]
    assert "--standalone" not in head
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        assert head[head.index(flag) + 1] == value


def test_real_command_exits_before_torchrun(tmp_path: pathlib.Path) -> None:
    """The installed entry point, as a subprocess: one stderr line, status 2, no rank output."""
    result = run_shardrec(_synthetic(tmp_path, "--epochs", "0"), timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["shardrec train: error: --epochs must be >= 1, got 0"]
    assert result.stdout == ""
    assert not (tmp_path / "run").exists()
