"""A rank SIGKILLed mid-training under `torchrun --max-restarts 1`: the job restarts, resumes
from the latest checkpoint, and ends with the weights of an uninterrupted run, bit for bit.

Both runs are real `torchrun --nproc-per-node 2` jobs of examples/fault_tolerant_training.py
(gloo, a c10d rendezvous on 127.0.0.1 and a free port), started side by side. The interrupted
run checkpoints every 3 steps and rank 1 kills itself at step 5, so the restart resumes from
step 3 and redoes steps 3 and 4. A second test shows the surviving rank does not hang: without
torchrun to tear the job down, rank 0 fails on its own, within the process group's timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from shardrec_testing import free_port

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "fault_tolerant_training.py"
STEPS = 8


def torchrun(ckpt_dir: Path, *extra: str) -> subprocess.Popen[str]:
    ckpt_dir.mkdir()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--monitor-interval",
        "0.1",
        # The script prefixes its store keys per attempt, so the restarted gloo mesh never
        # reads the dead attempt's addresses (torchrun keeps one store across restarts).
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        str(SCRIPT),
        "--ckpt-dir",
        str(ckpt_dir),
        "--steps",
        str(STEPS),
        "--ckpt-every",
        "3",
        "--timeout-s",
        "20",
        "--out",
        str(ckpt_dir / "final.pt"),
        *extra,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_killed_rank_restarts_and_matches_uninterrupted_run(tmp_path: Path) -> None:
    clean = torchrun(tmp_path / "clean")
    killed = torchrun(tmp_path / "killed", "--kill-rank", "1", "--kill-at-step", "5")
    clean_log, _ = clean.communicate(timeout=240)
    killed_log, _ = killed.communicate(timeout=240)
    assert clean.returncode == 0, clean_log[-4000:]
    assert killed.returncode == 0, killed_log[-4000:]
    assert "[rank 1] killing myself at step 5" in killed_log
    for rank in range(2):
        assert f"[rank {rank}] attempt 1: starting at step 3" in killed_log, killed_log[-4000:]
        assert f"[rank {rank}] finished {STEPS} steps" in killed_log
    assert "attempt 1" not in clean_log
    want = torch.load(tmp_path / "clean" / "final.pt")
    got = torch.load(tmp_path / "killed" / "final.pt")
    assert sorted(got) == sorted(want)
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_surviving_rank_fails_instead_of_hanging(tmp_path: Path) -> None:
    """Two plain processes (no torchrun): rank 1 dies at step 2, rank 0 must exit with an
    error by itself, bounded by `--timeout-s`, and never print that it finished."""
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        args = ["--ckpt-dir", str(tmp_path), "--steps", "4", "--ckpt-every", "10"]
        args += ["--kill-rank", "1", "--kill-at-step", "2", "--timeout-s", "5"]
        procs.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[1].returncode == -9, logs[1][-3000:]
    assert procs[0].returncode not in (0, None), logs[0][-3000:]
    assert "finished" not in logs[0]
