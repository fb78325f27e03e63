"""`--resume` over damaged checkpoints and changed flags.

The fallback itself on directories with a stand-in loader; then the real command (one rank):
one 6-step run with checkpoints at 2, 4 and 6 serves every check: a changed model shape and
unreadable manifests are refused before launch (one line, exit 2); a flipped byte in step 4
makes the resume fall back to step 2, say so, keep step 4 aside, and still end bit for bit
where the uninterrupted run ended.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from _train_helpers import SYNTHETIC, checkpoint_tensors, run_shardrec

import shardrec_train.cli as cli
from shardrec_dmp import CheckpointError
from shardrec_train.checkpoints import resume_latest

ARGS = [*SYNTHETIC, "--nproc-per-node", "1", "--max-steps", "6", "--checkpoint-every", "2"]


def _precheck(
    monkeypatch: pytest.MonkeyPatch, out: pathlib.Path, *extra: str
) -> tuple[int, list[list[str]]]:
    """`shardrec train --resume` up to the launch (recorded, not run): status, launches."""
    launched: list[list[str]] = []

    def fake_launch(cmd: list[str], nproc_per_node: int, threads: int | None = None) -> int:
        launched.append(list(cmd))
        return 0

    monkeypatch.setattr(cli, "launch", fake_launch)
    code = cli.main(["train", *ARGS, "--resume", "--out", str(out), *extra])
    return code, launched


def _checkpoint_dirs(out: pathlib.Path, names: list[str]) -> None:
    for name in names:
        (out / "checkpoints" / name).mkdir(parents=True)
        (out / "checkpoints" / name / "data").write_text(name)


def test_fallback_sets_damaged_checkpoints_aside(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _checkpoint_dirs(tmp_path, ["step_2", "step_4", "step_6", "step_6.corrupt", "step_10.partial"])
    tried: list[str] = []

    def load_one(path: pathlib.Path) -> None:
        tried.append(path.name)
        if path.name == "step_6":
            raise CheckpointError(f"checkpoint '{path}': file 'x.distcp' is damaged")
        if path.name == "step_4":
            raise FileNotFoundError(f"'{path}' is not a shardrec checkpoint (no shardrec.json)")

    assert resume_latest(tmp_path, load_one, lead=True) == (2, tmp_path / "checkpoints" / "step_2")
    assert tried == ["step_6", "step_4", "step_2"]
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [
        "step_10.partial",
        "step_2",
        "step_4.corrupt",
        "step_6.corrupt",
        "step_6.corrupt-2",
    ]
    assert (folder / "step_6.corrupt-2" / "data").read_text() == "step_6"  # kept as it was
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"resume: step_6 does not verify: checkpoint '{folder / 'step_6'}': file 'x.distcp' "
        "is damaged"
    )
    assert out[1].startswith(f"resume: kept it as {folder / 'step_6.corrupt-2'} for inspection")
    assert len(out) == 4 and "step_4 does not verify" in out[2]


def test_no_checkpoint_verifies(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    _checkpoint_dirs(tmp_path, ["step_3", "step_5"])

    def load_one(path: pathlib.Path) -> None:
        raise CheckpointError(f"{path.name} is damaged")

    with pytest.raises(CheckpointError, match=r"no checkpoint under .* verifies \(2 tried"):
        resume_latest(tmp_path, load_one, lead=False)
    # Only the lead rank renames and prints.
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_3", "step_5"]
    assert capsys.readouterr().out == ""


def _flip_byte(file: pathlib.Path, at: int) -> None:
    data = bytearray(file.read_bytes())
    data[at] ^= 0x01
    file.write_bytes(bytes(data))


@pytest.mark.slow
def test_resume_checks_and_falls_back(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    full = tmp_path / "full"
    result = run_shardrec(["train", *ARGS, "--out", str(full)])
    assert result.returncode == 0, result.stderr[-3000:]
    names = sorted(p.name for p in (full / "checkpoints").iterdir())
    assert names == ["step_2", "step_4", "step_6"]

    # Same flags: accepted (launched once). A changed shape: one line, before launch.
    code, launched = _precheck(monkeypatch, full)
    assert code == 0 and len(launched) == 1, capsys.readouterr().err
    code, launched = _precheck(monkeypatch, full, "--embedding-dim", "4", "--dense-arch", "16,4")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and launched == [] and len(err) == 1, err
    assert f"--resume: {full / 'checkpoints' / 'step_6'} holds a model of another shape" in err[0]
    assert "_mlp.1._linear.weight: [8, 16] saved, [4, 16] with these flags" in err[0]
    assert "and 4 more" in err[0]  # the 4 tables (64, 8) -> (64, 4) and the over arch

    # Every manifest unreadable: one line naming the file and what to do.
    broken = tmp_path / "broken"
    shutil.copytree(full, broken)
    for step in (2, 4, 6):
        (broken / "checkpoints" / f"step_{step}" / "shardrec.json").write_text('{"format_')
    code, launched = _precheck(monkeypatch, broken)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and launched == [] and len(err) == 1, err
    assert "step_6/shardrec.json is not valid JSON" in err[0] and "earlier checkpoint" in err[0]

    # Every checkpoint damaged: one error line from the lead rank, no rank traceback.
    damaged = tmp_path / "damaged"
    shutil.copytree(full, damaged)
    for step in (2, 4, 6):
        where = damaged / "checkpoints" / f"step_{step}"
        files = json.loads((where / "shardrec.json").read_text())["files"]
        first = sorted(n for n in files if n.endswith(".distcp"))[0]
        _flip_byte(where / first, files[first]["bytes"] // 2)
    result = run_shardrec(["train", *ARGS, "--resume", "--out", str(damaged)])
    assert result.returncode != 0, result.stdout[-2000:]
    errors = [line for line in result.stderr.splitlines() if "shardrec train: error:" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "no checkpoint under" in errors[0] and "verifies (3 tried" in errors[0], errors
    assert "shardrec_train/worker.py" not in result.stderr, result.stderr[-3000:]

    # A crash lost step 6, and one byte of step 4 flipped: resume from step 2.
    crashed = tmp_path / "crashed"
    shutil.copytree(full, crashed)
    shutil.rmtree(crashed / "checkpoints" / "step_6")
    step4 = crashed / "checkpoints" / "step_4"
    meta = json.loads((step4 / "shardrec.json").read_text())
    data = sorted(n for n in meta["files"] if n.endswith(".distcp"))[0]
    _flip_byte(step4 / data, meta["files"][data]["bytes"] // 2)
    result = run_shardrec(["train", *ARGS, "--resume", "--out", str(crashed)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resume: step_4 does not verify: checkpoint '{step4}': file '{data}' is damaged" in (
        result.stdout
    )
    assert f"kept it as {step4}.corrupt for inspection" in result.stdout
    assert f"resumed from {crashed / 'checkpoints' / 'step_2'} at step 2" in result.stdout
    kept = crashed / "checkpoints" / "step_4.corrupt"
    assert sorted(p.name for p in kept.iterdir()) == sorted([*meta["files"], "shardrec.json"])
    expected = checkpoint_tensors(full / "checkpoints" / "step_6", tmp_path)
    resumed = checkpoint_tensors(crashed / "checkpoints" / "step_6", tmp_path)
    assert sorted(resumed) == sorted(expected)
    for key, value in expected.items():
        assert resumed[key].equal(value), key
