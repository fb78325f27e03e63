"""`--resume` over damaged checkpoints and changed flags, with the real command (one rank).

One 6-step run with checkpoints at 2, 4 and 6 serves every check: a changed model shape and
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

ARGS = [*SYNTHETIC, "--nproc-per-node", "1", "--max-steps", "6", "--checkpoint-every", "2"]


def _precheck(
    monkeypatch: pytest.MonkeyPatch, out: pathlib.Path, *extra: str
) -> tuple[int, list[list[str]]]:
    """`shardrec train --resume` up to the launch (recorded, not run): status, launches."""
    launched: list[list[str]] = []

    def fake_launch(cmd: list[str], nproc_per_node: int) -> int:
        launched.append(list(cmd))
        return 0

    monkeypatch.setattr(cli, "launch", fake_launch)
    code = cli.main(["train", *ARGS, "--resume", "--out", str(out), *extra])
    return code, launched


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
