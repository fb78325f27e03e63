"""A rank stopped with SIGSTOP under `shardrec train --collective-timeout 10 --max-restarts 1`:
every rank of that attempt is gone within the timeout (plus slack), each printing the
watchdog's verdict naming the stopped rank and its pid, and torchrun's restart resumes from
the latest checkpoint and finishes the run.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import time

from _launch import TINY, kill_tree, pid_alive, rank_pids, start_train, wait_until

TIMEOUT_S = 10.0
# Process exit and torchrun noticing it, on a busy 2-core machine.
SLACK_S = 8.0
STEPS = 256  # num_samples 16384 / (2 ranks * 32)


def test_stopped_rank_is_named_every_rank_stops_and_the_restart_resumes(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "run"
    log = tmp_path / "log.txt"
    args = [*TINY, "--dataset-option", "num_samples=16384", "--checkpoint-every", "50"]
    args += ["--collective-timeout", str(TIMEOUT_S), "--max-restarts", "1", "--out", str(out)]
    proc = start_train(args, log)
    try:
        wait_until(lambda: (out / "checkpoints" / "step_50").is_dir(), 180, "first checkpoint")
        first = rank_pids(str(out))
        assert sorted(first.values()) == [0, 1], first
        stopped = next(pid for pid, rank in first.items() if rank == 1)
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        wait_until(
            lambda: not any(pid_alive(p) for p in first), TIMEOUT_S + SLACK_S, "attempt 0 gone"
        )
        gone_after = time.monotonic() - t0
        proc.wait(timeout=180)
    finally:
        kill_tree(proc)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert gone_after < TIMEOUT_S + SLACK_S
    for rank in (0,):  # rank 1 was stopped, then killed by its watcher (rank 0)
        assert re.search(
            rf"\[rank {rank}\] shardrec watchdog: rank 1 \(pid {stopped} on host \S+\) stopped "
            r"answering: no heartbeat for [\d.]+ s \(limit 5 s, half the collective timeout of "
            r"10 s; its last progress: \d+\), noticed by rank 0; stopping every rank",
            text,
        ), text[-4000:]
    resumed = re.findall(r"resumed from \S+/step_(\d+) at step (\d+)", text)
    assert len(resumed) == 1, text[-4000:]
    step = int(resumed[0][1])
    assert 50 <= step < STEPS and step % 50 == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == STEPS
    history = json.loads((out / "history.json").read_text())
    assert [s for s, _ in history["train_loss"]] == list(range(1, STEPS + 1))
